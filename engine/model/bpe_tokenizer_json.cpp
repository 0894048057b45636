// BpeTokenizer from a Hugging Face tokenizer.json: the checks that the file
// describes GPT-2's byte-level BPE, then its vocabulary and merges read with
// the same rules as encoder.json and vocab.bpe.
#include <nlohmann/json.hpp>

#include "engine/model/bpe_tokenizer.h"

namespace kvtier {
namespace {

using json = nlohmann::json;
using Error = std::unexpected<std::string>;

// A JSON value for a message: scalars as written, containers by type.
std::string describe(const json& value) {
  if (value.is_primitive()) return value.dump();
  return std::string("a JSON ") + value.type_name();
}

// The "type" of an optional settings object ("ByteLevel", "Sequence", ...),
// or what stands in its place.
std::string type_of(const json& settings) {
  if (!settings.is_object()) return describe(settings);
  const auto it = settings.find("type");
  return it == settings.end() ? "an object without \"type\"" : describe(*it);
}

// A boolean setting that must be absent or equal `wanted`.
std::expected<void, std::string> check_flag(const json& settings, const char* path, const char* key,
                                            bool wanted) {
  const auto it = settings.find(key);
  if (it == settings.end() || (it->is_boolean() && it->get<bool>() == wanted)) return {};
  return Error(std::string(path) + "." + key + " is " + describe(*it) + " (GPT-2 has " +
               (wanted ? "true" : "false") + ")");
}

// Every setting that would make encode() or decode() differ from GPT-2's.
std::expected<void, std::string> check_gpt2_byte_level(const json& doc) {
  const auto model = doc.find("model");
  if (model == doc.end() || !model->is_object()) return Error("no \"model\" object");
  if (type_of(*model) != "\"BPE\"") {
    return Error("model.type is " + type_of(*model) + " (expected \"BPE\")");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = model->find(key);
    if (it != model->end() && !it->is_null() && *it != "") {
      return Error(std::string("model.") + key + " is " + describe(*it) + " (GPT-2 has none)");
    }
  }
  const auto normalizer = doc.find("normalizer");
  if (normalizer != doc.end() && !normalizer->is_null()) {
    return Error("normalizer is " + type_of(*normalizer) + " (GPT-2 has none)");
  }
  const auto pre = doc.find("pre_tokenizer");
  if (pre == doc.end() || type_of(*pre) != "\"ByteLevel\"") {
    return Error("pre_tokenizer is " + (pre == doc.end() ? "absent" : type_of(*pre)) +
                 " (expected \"ByteLevel\")");
  }
  if (auto ok = check_flag(*pre, "pre_tokenizer", "add_prefix_space", false); !ok) return ok;
  if (auto ok = check_flag(*pre, "pre_tokenizer", "use_regex", true); !ok) return ok;
  const auto decoder = doc.find("decoder");
  if (decoder != doc.end() && !decoder->is_null() && type_of(*decoder) != "\"ByteLevel\"") {
    return Error("decoder is " + type_of(*decoder) + " (expected \"ByteLevel\")");
  }
  return {};
}

}  // namespace

std::expected<std::unique_ptr<BpeTokenizer>, std::string> BpeTokenizer::load_tokenizer_json(
    const std::filesystem::path& tokenizer_json) {
  auto text = tokenizer_detail::file_read(tokenizer_json);
  if (!text) return std::unexpected(std::move(text.error()));
  return parse_tokenizer_json(*text, tokenizer_json.string());
}

std::expected<std::unique_ptr<BpeTokenizer>, std::string> BpeTokenizer::parse_tokenizer_json(
    std::string_view text, std::string_view name) {
  const std::string where(name);
  const json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Error(where + ": invalid JSON");
  if (!doc.is_object()) return Error(where + ": expected a JSON object, got " + describe(doc));
  if (auto ok = check_gpt2_byte_level(doc); !ok) {
    return Error(where + ": not a GPT-2 byte-level BPE tokenizer: " + ok.error());
  }
  const json& model = doc["model"];
  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object() || vocab->empty()) {
    return Error(where + ": model.vocab must be a non-empty object {\"token\": id, ...}");
  }
  const auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) {
    return Error(where + ": model.merges must be an array");
  }

  auto created = create();
  if (!created) return created;
  BpeTokenizer* tok = created->get();
  const std::string vocab_where = where + ": model.vocab";
  if (auto ok = tok->read_vocabulary(*vocab, vocab_where); !ok) return Error(ok.error());
  std::vector<bool> produced = tok->byte_tokens();
  for (std::size_t i = 0; i < merges->size(); ++i) {
    const json& merge = (*merges)[i];
    const std::string merge_where = where + ": model.merges[" + std::to_string(i) + "]";
    // "left right" in most files; ["left", "right"] since tokenizers 0.20.
    std::optional<std::pair<std::string_view, std::string_view>> sides;
    if (merge.is_string()) {
      sides = merge_split(merge.get_ref<const std::string&>());
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string() && !merge[0].get_ref<const std::string&>().empty() &&
               !merge[1].get_ref<const std::string&>().empty()) {
      sides.emplace(merge[0].get_ref<const std::string&>(), merge[1].get_ref<const std::string&>());
    }
    if (!sides) {
      return Error(merge_where + ": expected \"left right\" or [\"left\", \"right\"], got " +
                   (merge.is_string() ? merge.dump() : describe(merge)));
    }
    if (auto ok = tok->add_merge(sides->first, sides->second, merge_where, vocab_where, produced);
        !ok) {
      return Error(ok.error());
    }
  }
  // Added tokens (<|endoftext|>) are raw text, and must be vocabulary entries
  // already: ids beyond model.vocab would be tokens decode() cannot spell.
  if (const auto added = doc.find("added_tokens"); added != doc.end() && !added->is_null()) {
    if (!added->is_array()) return Error(where + ": added_tokens must be an array");
    for (const json& token : *added) {
      const auto content = token.is_object() ? token.find("content") : token.end();
      const auto id = token.is_object() ? token.find("id") : token.end();
      if (content == token.end() || !content->is_string() || id == token.end() ||
          !id->is_number_integer()) {
        return Error(where +
                     ": added_tokens: each entry needs a string \"content\" and an "
                     "integer \"id\"");
      }
      if (tok->token_id(content->get_ref<const std::string&>()) != id->get<std::int64_t>()) {
        return Error(where + ": added token " + content->dump() + " (id " + id->dump() +
                     ") is not model.vocab's entry of that id; tokens beyond the vocabulary "
                     "are not supported");
      }
    }
  }
  if (const int eot = tok->token_id("<|endoftext|>"); eot >= 0) tok->end_of_text_ = eot;
  return created;
}

}  // namespace kvtier
