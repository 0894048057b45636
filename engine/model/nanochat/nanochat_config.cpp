#include "engine/model/nanochat/nanochat_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/model/config_keys.h"
#include "engine/model/tokenizer.h"

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
constexpr std::int64_t kMaxSequence = config_keys::kMaxPositions;

int ceil_div(int a, int b) { return (a + b - 1) / b; }

}  // namespace

int NanochatConfig::window(int layer) const {
  if (generation < 2) return -1;
  const bool last = layer == n_layer - 1;
  const char kind = window_pattern[layer % window_pattern.size()];
  if (last || kind == 'L') return sequence_len;
  switch (generation) {
    case 4:
      return ceil_div(sequence_len, 384) * 128;
    case 5:
      return ceil_div(sequence_len, 512) * 128;
    default:
      return sequence_len / 2;
  }
}

ModelConfig NanochatConfig::shape() const {
  const NanochatConfig& c = *this;
  ModelConfig shape;
  shape.n_layer = c.n_layer;
  shape.n_head = c.n_head;
  shape.n_kv_head = c.n_kv_head;
  shape.n_embd = c.n_embd;
  shape.vocab_size = c.vocab_size;
  shape.block_size = c.context;
  shape.tokenizer = c.tokenizer;
  shape.family = "nanochat";
  shape.rotary = true;
  for (int layer = 0; layer < c.n_layer && c.generation >= 2; ++layer)
    shape.windows.push_back(c.window(layer));
  return shape;
}

std::expected<NanochatConfig, std::string> NanochatConfig::parse(
    std::string_view json_text, const std::filesystem::path& model_dir) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    return Error(std::string("invalid JSON: ") + e.what());
  }
  if (!root.is_object()) return Error("expected a JSON object");
  auto format = read_string(root, "format");
  if (!format) return Error(format.error());
  if (*format != "nanochat")
    return Error("key \"format\" must be \"nanochat\" for a nanochat model");

  NanochatConfig c;
  auto generation = require_int(root, "generation", 5);
  if (!generation) return Error(generation.error());
  c.generation = *generation;
  const std::pair<const char*, std::int64_t> sizes[] = {
      {"n_layer", kMaxLayers}, {"n_head", kMaxEmbd},      {"n_kv_head", kMaxEmbd},
      {"n_embd", kMaxEmbd},    {"vocab_size", kMaxVocab}, {"sequence_len", kMaxSequence}};
  int* slots[] = {&c.n_layer, &c.n_head, &c.n_kv_head, &c.n_embd, &c.vocab_size, &c.sequence_len};
  for (int i = 0; i < 6; ++i) {
    auto v = require_int(root, sizes[i].first, sizes[i].second);
    if (!v) return Error(v.error());
    *slots[i] = *v;
  }
  if (c.n_embd % c.n_head != 0 || c.head_dim() % 2 != 0)
    return Error("n_embd " + std::to_string(c.n_embd) + " must divide into n_head " +
                 std::to_string(c.n_head) + " heads of an even size (rotary pairs dimensions)");
  if (c.n_head % c.n_kv_head != 0)
    return Error("n_head " + std::to_string(c.n_head) + " must be a multiple of n_kv_head " +
                 std::to_string(c.n_kv_head));
  if (c.ve_gate_channels() > c.n_embd || (c.has_smear() && kSmearChannels > c.n_embd))
    return Error("n_embd " + std::to_string(c.n_embd) +
                 " is narrower than the gates of generation " + std::to_string(c.generation) +
                 " read");

  auto context = read_int(root, "context", 10 * static_cast<std::int64_t>(c.sequence_len), false);
  if (!context) return Error(context.error() + " (10 x sequence_len, nanochat's rotary table)");
  c.context = context->value_or(c.sequence_len);

  auto pattern = read_string(root, "window_pattern");
  if (!pattern) return Error(pattern.error());
  if (c.generation >= 2) {
    if (!*pattern || (*pattern)->empty())
      return Error(
          "missing required key \"window_pattern\" (generation 2 on; \"L\" where the "
          "checkpoint's meta has none)");
    for (char& ch : **pattern) {
      ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      if (ch != 'S' && ch != 'L')
        return Error("key \"window_pattern\" must hold only 'S' and 'L', got \"" + **pattern +
                     "\"");
    }
    c.window_pattern = **pattern;
  }

  if (auto it = root.find("softcap"); it != root.end()) {
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() <= 0)
      return Error("key \"softcap\" must be a positive number, got " + describe(*it));
    c.softcap = static_cast<float>(it->get<double>());
  }
  auto rope = read_string(root, "rope_table");
  if (!rope) return Error(rope.error());
  if (!*rope || (**rope != "bf16" && **rope != "fp32"))
    return Error(
        "key \"rope_table\" must be \"bf16\" or \"fp32\" (how the checkpoint's rotary "
        "table was rounded in training)");
  c.rope_bf16 = **rope == "bf16";

  auto tok = TokenizerSpec::parse(root, model_dir);
  if (!tok) return Error(tok.error());
  c.tokenizer = std::move(*tok);
  return c;
}

std::expected<NanochatConfig, std::string> NanochatConfig::load(
    const std::filesystem::path& config_json) {
  auto text = tokenizer_detail::file_read(config_json);
  if (!text) return Error(text.error());
  auto config = parse(*text, config_json.parent_path());
  if (!config) return Error(config_json.string() + ": " + config.error());
  return config;
}

}  // namespace kvtier
