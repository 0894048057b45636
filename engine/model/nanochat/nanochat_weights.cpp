#include "engine/model/nanochat/nanochat_weights.h"

#include <algorithm>
#include <cstdint>
#include <unordered_set>

namespace kvtier {
namespace {

struct Spec {
  std::string name;
  std::vector<std::uint64_t> shape;
  const float** slot;
  // Read in place from the mapped file: the matrices (packed) and the
  // embedding tables (read by row). The gates and lambdas, which the forward
  // reads through their pointers on every pass, are copied: a fault on one
  // would map the page-cache folio around it, a neighbouring table's pages
  // with it.
  bool mapped = false;
};

std::string shape_string(const std::vector<std::uint64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// "a, b, c (and 4 more)": at most 8 of a list, for an error message.
std::string listed(std::vector<std::string> items) {
  std::ranges::sort(items);
  std::string out;
  for (std::size_t i = 0; i < std::min<std::size_t>(items.size(), 8); ++i)
    out += (i ? ", " : "") + items[i];
  if (items.size() > 8) out += " (and " + std::to_string(items.size() - 8) + " more)";
  return out;
}

}  // namespace

std::expected<NanochatWeights, std::string> NanochatWeights::load(
    const NanochatConfig& c, const std::filesystem::path& safetensors_path) {
  auto file = SafetensorsFile::open(safetensors_path);
  if (!file) return std::unexpected(file.error());
  const std::string where = safetensors_path.string() + ": ";
  const SafetensorsTensor* wte = file->find("transformer.wte.weight");
  if (wte == nullptr || wte->shape.size() != 2)
    return std::unexpected(where + "no 2-D 'transformer.wte.weight': not a nanochat state dict");
  const std::uint64_t Vp = wte->shape[0];
  if (Vp < static_cast<std::uint64_t>(c.vocab_size) || Vp > (1u << 24))
    return std::unexpected(where + "'transformer.wte.weight' has " + std::to_string(Vp) +
                           " rows, fewer than vocab_size " + std::to_string(c.vocab_size) +
                           " or above 2^24");

  NanochatWeights w;
  w.padded_vocab_ = static_cast<int>(Vp);
  const std::uint64_t C = c.n_embd, KV = c.kv_dim(), L = c.n_layer;
  std::vector<Spec> specs = {{"transformer.wte.weight", {Vp, C}, &w.wte_, true},
                             {"lm_head.weight", {Vp, C}, &w.lm_head_, true}};
  w.layers_.resize(c.n_layer);
  for (int i = 0; i < c.n_layer; ++i) {
    NanochatLayerWeights& l = w.layers_[i];
    const std::string h = "transformer.h." + std::to_string(i) + ".";
    specs.push_back({h + "attn.c_q.weight", {C, C}, &l.c_q, true});
    specs.push_back({h + "attn.c_k.weight", {KV, C}, &l.c_k, true});
    specs.push_back({h + "attn.c_v.weight", {KV, C}, &l.c_v, true});
    specs.push_back({h + "attn.c_proj.weight", {C, C}, &l.c_proj, true});
    specs.push_back({h + "mlp.c_fc.weight", {4 * C, C}, &l.mlp_fc, true});
    specs.push_back({h + "mlp.c_proj.weight", {C, 4 * C}, &l.mlp_proj, true});
    if (c.has_value_embedding(i)) {
      specs.push_back({h + "attn.ve_gate.weight",
                       {std::uint64_t(c.n_kv_head), std::uint64_t(c.ve_gate_channels())},
                       &l.ve_gate});
      specs.push_back(
          {"value_embeds." + std::to_string(i) + ".weight", {Vp, KV}, &l.value_embed, true});
    }
  }
  if (c.has_lambdas()) {
    specs.push_back({"resid_lambdas", {L}, &w.resid_lambdas_});
    specs.push_back({"x0_lambdas", {L}, &w.x0_lambdas_});
  }
  if (c.has_smear()) {
    specs.push_back({"smear_lambda", {1}, &w.smear_lambda_});
    specs.push_back({"backout_lambda", {1}, &w.backout_lambda_});
    specs.push_back({"smear_gate.weight", {1, NanochatConfig::kSmearChannels}, &w.smear_gate_});
  }

  std::vector<std::string> missing, wrong;
  std::unordered_set<std::string> expected;
  std::uint64_t floats = 0;
  for (const Spec& s : specs) {
    expected.insert(s.name);
    const SafetensorsTensor* t = file->find(s.name);
    if (t == nullptr) {
      missing.push_back("'" + s.name + "'");
    } else if (!safetensors_dtype_widens_to_f32(t->dtype)) {
      wrong.push_back("'" + s.name + "' is " + t->dtype + ", not F32, F16 or BF16");
    } else if (t->shape != s.shape) {
      wrong.push_back("'" + s.name + "' is " + shape_string(t->shape) + ", expected " +
                      shape_string(s.shape) + " for generation " + std::to_string(c.generation));
    } else {
      floats += t->elements();
    }
  }
  std::vector<std::string> unexpected;
  for (const std::string& name : file->names())
    if (!expected.contains(name)) unexpected.push_back("'" + name + "'");
  if (!missing.empty() || !unexpected.empty() || !wrong.empty()) {
    std::string message;
    if (!missing.empty()) message += "missing tensors: " + listed(missing);
    if (!unexpected.empty())
      message +=
          (message.empty() ? "" : "; ") + std::string("unexpected tensors: ") + listed(unexpected);
    if (!wrong.empty()) message += (message.empty() ? "" : "; ") + listed(wrong);
    return std::unexpected(where + message);
  }

  // F32 data aligned for a float is read where it lies; the rest is widened.
  auto in_place = [](const Spec& s, const SafetensorsTensor& t) {
    return s.mapped && t.dtype == "F32" &&
           reinterpret_cast<std::uintptr_t>(t.data) % alignof(float) == 0;
  };
  std::uint64_t widened = 0;
  for (const Spec& s : specs) {
    const SafetensorsTensor* t = file->find(s.name);
    if (!in_place(s, *t)) widened += t->elements();
  }
  if (widened > 0) w.buffer_ = std::make_unique_for_overwrite<float[]>(widened);
  float* next = w.buffer_.get();
  for (const Spec& s : specs) {
    const SafetensorsTensor* t = file->find(s.name);
    if (in_place(s, *t)) {
      *s.slot = reinterpret_cast<const float*>(t->data);
      continue;
    }
    safetensors_to_f32(*t, next);
    *s.slot = next;
    next += t->elements();
  }
  if (widened < floats) w.file_.emplace(std::move(*file));
  return w;
}

void NanochatWeights::copy_row(const float* table, std::size_t row_floats, int id,
                               float* out) const {
  const float* row = table + static_cast<std::size_t>(id) * row_floats;
  const auto* at = reinterpret_cast<const std::byte*>(row);
  if (file_ && at >= file_->mapped_bytes().data() &&
      at < file_->mapped_bytes().data() + file_->mapped_bytes().size()) {
    file_->copy_out(at, row_floats * sizeof(float), out);
  } else {
    std::copy_n(row, row_floats, out);
  }
}

void NanochatWeights::release_resident_pages() const {
  if (file_) file_->release_resident_pages();
}

}  // namespace kvtier
