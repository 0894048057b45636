#include "engine/model/model_config.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <system_error>
#include <utility>

#include "engine/model/config_keys.h"

namespace kvtier {
namespace {

using json = nlohmann::json;
using Error = std::unexpected<std::string>;
using config_keys::describe;
using config_keys::read_int;
using config_keys::read_string;
using config_keys::require_int;

using config_keys::kMaxEmbd;
using config_keys::kMaxLayers;
using config_keys::kMaxVocab;
constexpr std::int64_t kMaxBlockSize = config_keys::kMaxPositions;

// An optional, finite, positive epsilon; `fallback` when absent.
std::expected<float, std::string> read_eps(const json& root, const char* key, float fallback) {
  auto it = root.find(key);
  if (it == root.end()) return fallback;
  if (!it->is_number()) {
    return Error(std::string("key \"") + key + "\" must be a number, got " + describe(*it));
  }
  const auto eps = static_cast<float>(it->get<double>());
  // Checked after the conversion: 1e-50 is positive as a double but 0 as a float.
  if (!std::isfinite(eps) || eps <= 0.0f || eps >= 1.0f) {
    return Error(std::string("key \"") + key + "\" must be in (0, 1) as a float, got " +
                 describe(*it));
  }
  return eps;
}

std::expected<Gelu, std::string> parse_nanogpt_gelu(const json& root) {
  auto s = read_string(root, "gelu");
  if (!s) return Error(s.error());
  if (!*s) return Error("missing required key \"gelu\" (\"erf\" or \"tanh\")");
  if (**s == "erf") return Gelu::kErf;
  if (**s == "tanh") return Gelu::kTanh;
  return Error("key \"gelu\" must be \"erf\" or \"tanh\", got \"" + **s + "\"");
}

std::expected<Gelu, std::string> parse_hf_activation(const json& root) {
  auto s = read_string(root, "activation_function");
  if (!s) return Error(s.error());
  if (!*s) return Gelu::kTanh;  // Hugging Face's GPT2Config default is gelu_new
  // gelu_new and gelu_pytorch_tanh are the same tanh approximation.
  if (**s == "gelu_new" || **s == "gelu_pytorch_tanh") return Gelu::kTanh;
  if (**s == "gelu") return Gelu::kErf;
  return Error(
      "key \"activation_function\" must be \"gelu_new\", \"gelu_pytorch_tanh\" or "
      "\"gelu\", got \"" +
      **s + "\"");
}

std::expected<kernels::WeightLayout, std::string> parse_layout(const json& root) {
  auto s = read_string(root, "weight_layout");
  if (!s) return Error(s.error());
  if (!*s || **s == "out_in") return kernels::WeightLayout::kOutIn;
  if (**s == "in_out") return kernels::WeightLayout::kInOut;
  return Error("key \"weight_layout\" must be \"out_in\" or \"in_out\", got \"" + **s + "\"");
}

// A tokenizer file name: a non-empty string, resolved against the model folder.
std::expected<std::filesystem::path, std::string> tokenizer_file(
    const json& tok, const char* key, const std::filesystem::path& model_dir) {
  auto it = tok.find(key);
  if (it == tok.end() || !it->is_string() || it->get<std::string>().empty()) {
    return Error(std::string("key \"tokenizer.") + key + "\" must be a non-empty string");
  }
  return model_dir / it->get<std::string>();
}

// The tokenizer files a model folder holds, when its config names none; kNone
// when it holds none of the known sets (see model_config.h for the order).
TokenizerSpec detect_tokenizer(const std::filesystem::path& model_dir) {
  const auto exists = [&](const char* name) {
    std::error_code ec;
    return std::filesystem::is_regular_file(model_dir / name, ec);
  };
  TokenizerSpec spec;
  for (const auto& [vocab, merges] :
       {std::pair{"encoder.json", "vocab.bpe"}, std::pair{"vocab.json", "merges.txt"}}) {
    if (exists(vocab) && exists(merges)) {
      spec.type = TokenizerSpec::Type::kBpe;
      spec.vocab = model_dir / vocab;
      spec.merges = model_dir / merges;
      return spec;
    }
  }
  if (exists("tokenizer.json")) {
    spec.type = TokenizerSpec::Type::kBpeTokenizerJson;
    spec.vocab = model_dir / "tokenizer.json";
  }
  return spec;
}

// {"type": "tiktoken", "ranks": FILE, "pattern": REGEX, "special_tokens": {TEXT: ID}}.
std::expected<TokenizerSpec, std::string> parse_tiktoken(const json& tok,
                                                         const std::filesystem::path& model_dir) {
  constexpr std::size_t kMaxPatternBytes = 4096;
  TokenizerSpec spec;
  spec.type = TokenizerSpec::Type::kTiktoken;
  auto ranks = tokenizer_file(tok, "ranks", model_dir);
  if (!ranks) return Error(ranks.error());
  spec.vocab = *ranks;
  auto pattern = tok.find("pattern");
  if (pattern == tok.end() || !pattern->is_string() || pattern->get<std::string>().empty() ||
      pattern->get<std::string>().size() > kMaxPatternBytes)
    return Error("key \"tokenizer.pattern\" must be a non-empty string of at most " +
                 std::to_string(kMaxPatternBytes) + " bytes (the vocabulary's split regex)");
  spec.pattern = pattern->get<std::string>();
  auto specials = tok.find("special_tokens");
  if (specials == tok.end() || specials->is_null()) return spec;
  if (!specials->is_object())
    return Error("key \"tokenizer.special_tokens\" must be an object {\"<|bos|>\": id, ...}, got " +
                 describe(*specials));
  for (const auto& [text, id] : specials->items()) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
        id.get<std::int64_t>() >= kMaxVocab)
      return Error("key \"tokenizer.special_tokens\": \"" + text +
                   "\" must have an integer id in [0, 2^24), got " + describe(id));
    spec.special_tokens.push_back({text, static_cast<int>(id.get<std::int64_t>())});
  }
  return spec;
}

std::expected<TokenizerSpec, std::string> parse_tokenizer(const json& root,
                                                          const std::filesystem::path& model_dir) {
  TokenizerSpec spec;
  auto it = root.find("tokenizer");
  if (it == root.end() || it->is_null()) return detect_tokenizer(model_dir);
  if (!it->is_object()) return Error("key \"tokenizer\" must be an object, got " + describe(*it));
  auto type = read_string(*it, "type");
  if (!type) return Error("key \"tokenizer.type\" must be a string");
  if (!*type)
    return Error("missing required key \"tokenizer.type\" (\"char\", \"bpe\" or \"tiktoken\")");
  if (**type == "char") {
    auto vocab = tokenizer_file(*it, "vocab", model_dir);
    if (!vocab) return Error(vocab.error());
    spec.type = TokenizerSpec::Type::kChar;
    spec.vocab = *vocab;
    return spec;
  }
  if (**type == "bpe") {
    auto encoder = tokenizer_file(*it, "encoder", model_dir);
    if (!encoder) return Error(encoder.error());
    auto merges = tokenizer_file(*it, "merges", model_dir);
    if (!merges) return Error(merges.error());
    spec.type = TokenizerSpec::Type::kBpe;
    spec.vocab = *encoder;
    spec.merges = *merges;
    return spec;
  }
  if (**type == "tiktoken") return parse_tiktoken(*it, model_dir);
  return Error("key \"tokenizer.type\" must be \"char\", \"bpe\" or \"tiktoken\", got \"" + **type +
               "\"");
}

// The keys both dialects share: n_layer, n_head, n_embd, vocab_size.
std::expected<void, std::string> parse_common_sizes(const json& root, ModelConfig& c) {
  auto n_layer = require_int(root, "n_layer", kMaxLayers);
  if (!n_layer) return Error(n_layer.error());
  auto n_embd = require_int(root, "n_embd", kMaxEmbd);
  if (!n_embd) return Error(n_embd.error());
  auto n_head = require_int(root, "n_head", kMaxEmbd);
  if (!n_head) return Error(n_head.error());
  auto vocab = require_int(root, "vocab_size", kMaxVocab);
  if (!vocab) return Error(vocab.error());
  c.n_layer = *n_layer;
  c.n_embd = *n_embd;
  c.n_head = *n_head;
  c.n_kv_head = *n_head;
  c.vocab_size = *vocab;
  return {};
}

std::expected<ModelConfig, std::string> parse_nanogpt(const json& root,
                                                      const std::filesystem::path& model_dir) {
  ModelConfig c;
  if (auto ok = parse_common_sizes(root, c); !ok) return Error(ok.error());
  auto block = require_int(root, "block_size", kMaxBlockSize);
  if (!block) return Error(block.error());
  c.block_size = *block;
  auto kv = read_int(root, "n_kv_head", kMaxEmbd, /*required=*/false);
  if (!kv) return Error(kv.error());
  if (*kv) c.n_kv_head = **kv;
  if (auto it = root.find("bias"); it != root.end()) {
    if (!it->is_boolean()) return Error("key \"bias\" must be true or false, got " + describe(*it));
    c.bias = it->get<bool>();
  }
  auto gelu = parse_nanogpt_gelu(root);
  if (!gelu) return Error(gelu.error());
  c.gelu = *gelu;
  auto layout = parse_layout(root);
  if (!layout) return Error(layout.error());
  c.weight_layout = *layout;
  auto eps = read_eps(root, "layer_norm_eps", 1e-5f);
  if (!eps) return Error(eps.error());
  c.layer_norm_eps = *eps;
  auto tok = parse_tokenizer(root, model_dir);
  if (!tok) return Error(tok.error());
  c.tokenizer = std::move(*tok);
  return c;
}

std::expected<ModelConfig, std::string> parse_hf(const json& root,
                                                 const std::filesystem::path& model_dir) {
  ModelConfig c;
  if (auto ok = parse_common_sizes(root, c); !ok) return Error(ok.error());
  auto block = require_int(root, "n_positions", kMaxBlockSize);
  if (!block) return Error(block.error());
  c.block_size = *block;
  // The forward pass is GPT-2's: MLP exactly 4x wide, LM head tied to wte.
  auto inner = read_int(root, "n_inner", std::int64_t{4} * kMaxEmbd, /*required=*/false);
  if (!inner) return Error(inner.error());
  if (*inner && **inner != 4 * c.n_embd) {
    return Error("key \"n_inner\" is " + std::to_string(**inner) +
                 "; only 4 * n_embd (or null) is supported");
  }
  if (auto it = root.find("tie_word_embeddings"); it != root.end()) {
    if (!it->is_boolean() || !it->get<bool>()) {
      return Error("key \"tie_word_embeddings\" must be true: untied LM heads are not supported");
    }
  }
  auto gelu = parse_hf_activation(root);
  if (!gelu) return Error(gelu.error());
  c.gelu = *gelu;
  c.weight_layout = kernels::WeightLayout::kInOut;  // Conv1D stores (in, out)
  c.bias = true;
  auto eps = read_eps(root, "layer_norm_epsilon", 1e-5f);
  if (!eps) return Error(eps.error());
  c.layer_norm_eps = *eps;
  auto tok = parse_tokenizer(root, model_dir);
  if (!tok) return Error(tok.error());
  c.tokenizer = std::move(*tok);
  return c;
}

// Rules that relate keys to each other, checked once whatever the dialect.
std::expected<void, std::string> check_heads(const ModelConfig& c) {
  if (c.n_embd % c.n_head != 0) {
    return Error("key \"n_embd\" (" + std::to_string(c.n_embd) +
                 ") must be divisible by \"n_head\" (" + std::to_string(c.n_head) + ")");
  }
  if (c.n_kv_head > c.n_head || c.n_head % c.n_kv_head != 0) {
    return Error("key \"n_head\" (" + std::to_string(c.n_head) +
                 ") must be a multiple of \"n_kv_head\" (" + std::to_string(c.n_kv_head) + ")");
  }
  return {};
}

std::expected<ModelConfig, std::string> parse_root(const json& root,
                                                   const std::filesystem::path& model_dir) {
  if (!root.is_object()) {
    return Error(std::string("config is a JSON ") + root.type_name() + ", not an object");
  }
  auto format = read_string(root, "format");
  if (!format) return Error(format.error());
  auto model_type = read_string(root, "model_type");
  if (!model_type) return Error(model_type.error());

  std::expected<ModelConfig, std::string> config;
  if (*format) {
    if (**format != "nanogpt") {
      return Error("key \"format\" must be \"nanogpt\", got \"" + **format + "\"");
    }
    config = parse_nanogpt(root, model_dir);
  } else if (*model_type) {
    if (**model_type != "gpt2") {
      return Error("key \"model_type\" must be \"gpt2\", got \"" + **model_type + "\"");
    }
    config = parse_hf(root, model_dir);
  } else {
    return Error(
        "config names no dialect: expected \"format\": \"nanogpt\" or \"model_type\": \"gpt2\"");
  }
  if (!config) return config;
  if (auto ok = check_heads(*config); !ok) return Error(ok.error());
  return config;
}

}  // namespace

std::expected<ModelConfig, std::string> ModelConfig::parse(std::string_view json_text,
                                                           const std::filesystem::path& model_dir) {
  // nlohmann throws on malformed JSON and on type misuse; neither may escape.
  try {
    json root = json::parse(json_text.begin(), json_text.end(), nullptr,
                            /*allow_exceptions=*/false);
    if (root.is_discarded()) return Error("config is not valid JSON");
    return parse_root(root, model_dir);
  } catch (const std::exception& e) {
    return Error(std::string("config cannot be read: ") + e.what());
  }
}

std::expected<ModelConfig, std::string> ModelConfig::load(
    const std::filesystem::path& config_json) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(config_json, ec)) {
    return Error(config_json.string() + ": not a readable regular file");
  }
  std::ifstream in(config_json, std::ios::binary);
  if (!in) return Error(config_json.string() + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Error(config_json.string() + ": read error");
  auto config = parse(text.str(), config_json.parent_path());
  if (!config) return Error(config_json.string() + ": " + config.error());
  return config;
}

std::expected<TokenizerSpec, std::string> TokenizerSpec::parse(
    const nlohmann::json& config, const std::filesystem::path& model_dir) {
  return parse_tokenizer(config, model_dir);
}

ModelConfig ModelConfig::gpt2_124m() {
  ModelConfig c;
  c.n_layer = 12;
  c.n_head = 12;
  c.n_kv_head = 12;
  c.n_embd = 768;
  c.vocab_size = 50257;
  c.block_size = 1024;
  c.bias = true;
  c.gelu = Gelu::kTanh;
  c.weight_layout = kernels::WeightLayout::kInOut;
  c.layer_norm_eps = 1e-5f;
  return c;
}

std::optional<int> special_token_id(std::span<const SpecialToken> specials, std::string_view text) {
  for (const SpecialToken& special : specials)
    if (special.text == text) return special.id;
  return std::nullopt;
}

}  // namespace kvtier
