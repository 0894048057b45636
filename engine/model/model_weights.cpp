#include "engine/model/model_weights.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "engine/model/safetensors.h"
#include "util/random.h"

namespace kvtier {
namespace {

using Error = std::unexpected<std::string>;

// How random() fills a tensor.
enum class Init { kNormal, kSmall, kOnes, kZeros };

// One parameter tensor: its name without the "transformer." prefix, its shape in the
// file for the config's layout, where its pointer goes, and how random() fills it.
// This one table drives both load() and random(), so the two cannot disagree.
struct ParamSpec {
  std::string name;
  std::vector<std::uint64_t> shape;
  const float** slot;
  Init init;

  std::uint64_t elements() const {
    std::uint64_t n = 1;
    for (std::uint64_t d : shape) n *= d;  // sizes are bounded by ModelConfig's limits
    return n;
  }
};

// Where the pointers of a ModelWeights go; load() and random() fill these.
struct Slots {
  const float** wte;
  const float** wpe;
  std::vector<LayerWeights>* layers;
  const float** ln_f_w;
  const float** ln_f_b;
};

// The shape of a linear map in -> out as the file stores it.
std::vector<std::uint64_t> linear_shape(const ModelConfig& c, std::uint64_t in, std::uint64_t out) {
  if (c.weight_layout == kernels::WeightLayout::kOutIn) return {out, in};
  return {in, out};
}

std::vector<ParamSpec> param_specs(const ModelConfig& c, const Slots& s) {
  const std::uint64_t C = c.n_embd;
  const std::uint64_t kv = c.kv_dim();
  std::vector<ParamSpec> specs;
  specs.push_back({"wte.weight", {std::uint64_t(c.vocab_size), C}, s.wte, Init::kNormal});
  specs.push_back({"wpe.weight", {std::uint64_t(c.block_size), C}, s.wpe, Init::kNormal});
  auto add_norm = [&](const std::string& name, const float** w, const float** b) {
    specs.push_back({name + ".weight", {C}, w, Init::kOnes});
    if (c.bias) specs.push_back({name + ".bias", {C}, b, Init::kZeros});
  };
  auto add_linear = [&](const std::string& name, std::uint64_t in, std::uint64_t out,
                        const float** w, const float** b) {
    specs.push_back({name + ".weight", linear_shape(c, in, out), w, Init::kNormal});
    if (c.bias) specs.push_back({name + ".bias", {out}, b, Init::kSmall});
  };
  s.layers->assign(c.n_layer, LayerWeights{});
  for (int i = 0; i < c.n_layer; ++i) {
    LayerWeights& l = (*s.layers)[i];
    const std::string h = "h." + std::to_string(i) + ".";
    add_norm(h + "ln_1", &l.ln_1_w, &l.ln_1_b);
    // Fused q, k, v: 3C for GPT-2; narrower when random() serves a grouped-query config.
    add_linear(h + "attn.c_attn", C, C + 2 * kv, &l.attn_qkv_w, &l.attn_qkv_b);
    add_linear(h + "attn.c_proj", C, C, &l.attn_proj_w, &l.attn_proj_b);
    add_norm(h + "ln_2", &l.ln_2_w, &l.ln_2_b);
    add_linear(h + "mlp.c_fc", C, 4 * C, &l.mlp_fc_w, &l.mlp_fc_b);
    add_linear(h + "mlp.c_proj", 4 * C, C, &l.mlp_proj_w, &l.mlp_proj_b);
  }
  add_norm("ln_f", s.ln_f_w, s.ln_f_b);
  return specs;
}

std::string shape_string(const std::vector<std::uint64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

const char* layout_name(kernels::WeightLayout layout) {
  return layout == kernels::WeightLayout::kOutIn ? "out_in" : "in_out";
}

// Checks what the config requires of the model beyond what ModelConfig::parse
// already guarantees (configs can also be built by hand).
std::expected<void, std::string> check_config(const ModelConfig& c) {
  if (c.n_layer <= 0 || c.n_head <= 0 || c.n_kv_head <= 0 || c.n_embd <= 0 || c.vocab_size <= 0 ||
      c.block_size <= 0 || c.n_embd % c.n_head != 0) {
    return Error("invalid model config: sizes must be positive and n_embd divisible by n_head");
  }
  if (c.n_kv_head != c.n_head) {
    return Error(
        "GPT-2 weights need n_kv_head == n_head (c_attn is fused 3 * n_embd wide); "
        "config has n_kv_head " +
        std::to_string(c.n_kv_head) + " and n_head " + std::to_string(c.n_head));
  }
  return {};
}

// "transformer.h.3.attn.bias" style causal-mask buffers that some exporters keep in
// the state dict. They are not parameters and are skipped.
bool is_mask_buffer(std::string_view name, std::string_view prefix, int n_layer) {
  if (!name.starts_with(prefix)) return false;
  name.remove_prefix(prefix.size());
  if (!name.starts_with("h.")) return false;
  name.remove_prefix(2);
  const std::size_t digits = name.find_first_not_of("0123456789");
  if (digits == 0 || digits == std::string_view::npos || digits > 4) return false;
  const int layer = std::stoi(std::string(name.substr(0, digits)));
  if (layer >= n_layer) return false;
  name.remove_prefix(digits);
  return name == ".attn.bias" || name == ".attn.masked_bias";
}

// Collects every problem with a file so one error message reports them all.
class Problems {
 public:
  void missing(std::string name) { missing_.push_back(std::move(name)); }
  void unexpected(std::string name) { unexpected_.push_back(std::move(name)); }
  void other(std::string text) { other_.push_back(std::move(text)); }
  bool empty() const { return missing_.empty() && unexpected_.empty() && other_.empty(); }

  std::string message() const {
    std::string out;
    append(out, "missing tensors: ", missing_, /*quote=*/true);
    append(out, "unexpected tensors: ", unexpected_, /*quote=*/true);
    append(out, "", other_, /*quote=*/false);
    return out;
  }

 private:
  // At most kShown items per category keep a badly wrong file's message readable.
  static void append(std::string& out, const char* label, std::vector<std::string> items,
                     bool quote) {
    constexpr std::size_t kShown = 8;
    if (items.empty()) return;
    std::ranges::sort(items);
    if (!out.empty()) out += "; ";
    out += label;
    for (std::size_t i = 0; i < std::min(items.size(), kShown); ++i) {
      if (i > 0) out += quote ? ", " : "; ";
      out += quote ? "'" + items[i] + "'" : items[i];
    }
    if (items.size() > kShown) out += " (and " + std::to_string(items.size() - kShown) + " more)";
  }

  std::vector<std::string> missing_, unexpected_, other_;
};

// Checks dtype and shape of a tensor the config calls for, and for F32 (which
// is used in place) its alignment; false on failure.
bool check_tensor(const SafetensorsTensor& t, const std::string& name,
                  const std::vector<std::uint64_t>& shape, kernels::WeightLayout layout,
                  Problems& problems) {
  if (!safetensors_dtype_widens_to_f32(t.dtype)) {
    problems.other("tensor '" + name + "': dtype " + t.dtype +
                   ", only F32, F16 and BF16 are supported");
    return false;
  }
  if (t.shape != shape) {
    problems.other("tensor '" + name + "': shape " + shape_string(t.shape) + ", expected " +
                   shape_string(shape) + " for weight_layout " + layout_name(layout));
    return false;
  }
  if (t.dtype == "F32" && reinterpret_cast<std::uintptr_t>(t.data) % alignof(float) != 0) {
    problems.other("tensor '" + name + "': data is not 4-byte aligned in the file");
    return false;
  }
  return true;
}

// The optional lm_head.weight must be wte itself: same dtype, shape and bytes.
void check_lm_head(const SafetensorsFile& file, const SafetensorsTensor* wte, Problems& problems) {
  const SafetensorsTensor* head = file.find("lm_head.weight");
  if (head == nullptr || wte == nullptr) return;
  if (head->dtype != wte->dtype || head->shape != wte->shape ||
      (head->data != wte->data && std::memcmp(head->data, wte->data, wte->bytes) != 0)) {
    problems.other("untied lm_head.weight is not supported (it must equal wte.weight)");
  }
}

// Decides the name prefix from where the token embedding is.
std::expected<std::string, std::string> name_prefix(const SafetensorsFile& file) {
  const bool nanogpt = file.find("transformer.wte.weight") != nullptr;
  const bool hf = file.find("wte.weight") != nullptr;
  if (nanogpt && hf) {
    return Error("both 'transformer.wte.weight' and 'wte.weight' present: cannot tell the naming");
  }
  if (!nanogpt && !hf) {
    return Error("missing tensors: no token embedding ('transformer.wte.weight' or 'wte.weight')");
  }
  return std::string(nanogpt ? "transformer." : "");
}

// --- deterministic random numbers: integer arithmetic and IEEE +-*/sqrt only, so the
// values are the same on every machine and compiler (the build sets -ffp-contract=off).
// The words come from util/random.h.

using util::splitmix64;
using util::Xoshiro256StarStar;

// Natural log for normal x > 0 from the exponent bits and a fixed atanh series:
// libm's log may differ in the last bit between library versions, this does not.
// About 1e-11 relative error, far below float resolution.
double portable_log(double x) {
  const auto bits = std::bit_cast<std::uint64_t>(x);
  int e = static_cast<int>((bits >> 52) & 0x7FF) - 1022;
  // x = m * 2^e with m in [0.5, 1): keep the mantissa, set the exponent of 0.5.
  double m = std::bit_cast<double>((bits & 0x000FFFFFFFFFFFFFull) | 0x3FE0000000000000ull);
  if (m < 0.70710678118654752440) {  // centre m on 1: m in [sqrt(1/2), sqrt(2))
    m *= 2.0;
    e -= 1;
  }
  // log(m) = 2 atanh(z), z = (m-1)/(m+1), |z| <= 0.172: terms to z^11 leave 5e-11.
  const double z = (m - 1.0) / (m + 1.0);
  const double z2 = z * z;
  const double p =
      ((((1.0 / 11 * z2 + 1.0 / 9) * z2 + 1.0 / 7) * z2 + 1.0 / 5) * z2 + 1.0 / 3) * z2 + 1.0;
  return 2.0 * z * p + e * 0.69314718055994530942;
}

// Fills out[0..n) with stddev * N(0, 1) by Marsaglia's polar method.
void fill_normal(float* out, std::size_t n, double stddev, Xoshiro256StarStar& rng) {
  constexpr double kScale = 1.0 / 2147483648.0;  // 2^-31
  std::size_t i = 0;
  while (i < n) {
    const std::uint64_t r = rng.next();
    // Two signed 32-bit halves, offset by half a step: u, v in (-1, 1), never 0.
    const double u = (static_cast<std::int32_t>(r >> 32) + 0.5) * kScale;
    const double v = (static_cast<std::int32_t>(r & 0xFFFFFFFFu) + 0.5) * kScale;
    const double s = u * u + v * v;
    if (s >= 1.0) continue;
    const double f = std::sqrt(-2.0 * portable_log(s) / s) * stddev;
    out[i++] = static_cast<float>(u * f);
    if (i < n) out[i++] = static_cast<float>(v * f);
  }
}

// Random tensors are cut into chunks with their own seeded stream, so they can be
// generated in parallel and the values do not depend on the thread count.
constexpr std::size_t kChunkFloats = std::size_t{1} << 16;
// Each tensor starts on a 64-byte boundary inside the buffer.
constexpr std::size_t kAlignFloats = 64 / sizeof(float);

// Floats a tensor of n elements takes in a buffer, padding included.
std::size_t aligned_floats(std::size_t n) {
  return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
}

// A 64-byte aligned buffer of `floats` floats (at least one line), for
// AlignedFree. Throws std::bad_alloc.
float* aligned_buffer(std::size_t floats) {
  void* p = std::aligned_alloc(64, std::max(floats, kAlignFloats) * sizeof(float));
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<float*>(p);
}

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : text) h = (h ^ ch) * 0x100000001B3ull;
  return h;
}

struct Chunk {
  std::size_t tensor;
  std::size_t begin;  // element offset within the tensor
  std::size_t count;
};

void fill_chunk(float* tensor, const ParamSpec& spec, const Chunk& chunk, std::uint64_t seed) {
  float* out = tensor + chunk.begin;
  switch (spec.init) {
    case Init::kOnes:
      std::fill_n(out, chunk.count, 1.0f);
      return;
    case Init::kZeros:
      std::fill_n(out, chunk.count, 0.0f);
      return;
    case Init::kNormal:
    case Init::kSmall: {
      // The stream depends on the tensor's name, not its place in the table, so a
      // tensor keeps its values when, say, bias is switched off.
      std::uint64_t state = seed;
      state = splitmix64(state) ^ fnv1a(spec.name);
      state = splitmix64(state) ^ (chunk.begin / kChunkFloats);
      Xoshiro256StarStar rng(splitmix64(state));
      fill_normal(out, chunk.count, spec.init == Init::kNormal ? 0.02 : 0.01, rng);
      return;
    }
  }
}

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};

}  // namespace

struct ModelWeights::Storage {
  std::optional<SafetensorsFile> file;           // load(): the mapping, when F32 tensors are used
  std::unique_ptr<float[], AlignedFree> buffer;  // random(), or load()'s widened F16/BF16 tensors
};

ModelWeights::ModelWeights() : storage_(std::make_unique<Storage>()) {}

void ModelWeights::release_resident_pages() const {
  if (storage_->file) storage_->file->release_resident_pages();
}
ModelWeights::ModelWeights(ModelWeights&&) noexcept = default;
ModelWeights& ModelWeights::operator=(ModelWeights&&) noexcept = default;
ModelWeights::~ModelWeights() = default;

std::expected<ModelWeights, std::string> ModelWeights::load(
    const ModelConfig& config, const std::filesystem::path& safetensors_path) {
  auto fail = [&](const std::string& what) {
    return Error(safetensors_path.string() + ": " + what);
  };
  if (auto ok = check_config(config); !ok) return fail(ok.error());
  auto file = SafetensorsFile::open(safetensors_path);
  if (!file) return Error(file.error());  // already names the file
  auto prefix = name_prefix(*file);
  if (!prefix) return fail(prefix.error());

  ModelWeights w;
  const auto specs =
      param_specs(config, Slots{&w.wte_, &w.wpe_, &w.layers_, &w.ln_f_w_, &w.ln_f_b_});
  Problems problems;
  std::unordered_set<std::string> wanted;
  // F32 tensors are used in place; F16 and BF16 ones are widened into one
  // heap buffer, laid out as random() lays out its tensors.
  struct Widen {
    const ParamSpec* spec;
    const SafetensorsTensor* tensor;
    std::size_t offset;  // in floats, into the buffer
  };
  std::vector<Widen> to_widen;
  std::size_t widened_floats = 0;
  for (const ParamSpec& spec : specs) {
    const std::string name = *prefix + spec.name;
    wanted.insert(name);
    const SafetensorsTensor* t = file->find(name);
    if (t == nullptr) {
      problems.missing(name);
      continue;
    }
    w.parameter_bytes_ += spec.elements() * sizeof(float);
    if (!check_tensor(*t, name, spec.shape, config.weight_layout, problems)) continue;
    if (t->dtype == "F32") {
      *spec.slot = reinterpret_cast<const float*>(t->data);
    } else {
      to_widen.push_back({&spec, t, widened_floats});
      widened_floats += aligned_floats(spec.elements());
    }
  }
  for (const std::string& name : file->names()) {
    if (wanted.contains(name) || name == "lm_head.weight" ||
        is_mask_buffer(name, *prefix, config.n_layer)) {
      continue;
    }
    problems.unexpected(name);
  }
  check_lm_head(*file, file->find(*prefix + "wte.weight"), problems);
  if (!problems.empty()) return fail(problems.message());

  if (!to_widen.empty()) {
    float* buffer = aligned_buffer(widened_floats);
    w.storage_->buffer.reset(buffer);
    const auto n_widen = static_cast<std::int64_t>(to_widen.size());
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < n_widen; ++i) {
      safetensors_to_f32(*to_widen[i].tensor, buffer + to_widen[i].offset);
    }
    for (const Widen& t : to_widen) *t.spec->slot = buffer + t.offset;
  }
  // A file with no F32 tensor is not read again: unmap it.
  if (to_widen.size() < specs.size()) w.storage_->file.emplace(std::move(*file));
  return w;
}

ModelWeights ModelWeights::random(const ModelConfig& config, std::uint64_t seed) {
  ModelWeights w;
  const auto specs =
      param_specs(config, Slots{&w.wte_, &w.wpe_, &w.layers_, &w.ln_f_w_, &w.ln_f_b_});

  std::vector<std::size_t> offsets;  // in floats, each a multiple of kAlignFloats
  std::vector<Chunk> chunks;
  std::size_t total = 0;
  for (std::size_t t = 0; t < specs.size(); ++t) {
    offsets.push_back(total);
    const std::size_t n = specs[t].elements();
    for (std::size_t begin = 0; begin < n; begin += kChunkFloats) {
      chunks.push_back({t, begin, std::min(kChunkFloats, n - begin)});
    }
    total += aligned_floats(n);
    w.parameter_bytes_ += n * sizeof(float);
  }
  float* buffer = aligned_buffer(total);
  w.storage_->buffer.reset(buffer);

  const auto n_chunks = static_cast<std::int64_t>(chunks.size());
#pragma omp parallel for schedule(dynamic, 16)
  for (std::int64_t i = 0; i < n_chunks; ++i) {
    const Chunk& c = chunks[i];
    fill_chunk(buffer + offsets[c.tensor], specs[c.tensor], c, seed);
  }
  for (std::size_t t = 0; t < specs.size(); ++t) *specs[t].slot = buffer + offsets[t];
  return w;
}

std::expected<void, std::string> ModelWeights::save(const ModelConfig& config,
                                                    const std::filesystem::path& path) const {
  // The table's slots point into this scratch copy of the pointers.
  const float *wte = nullptr, *wpe = nullptr, *ln_f_w = nullptr, *ln_f_b = nullptr;
  std::vector<LayerWeights> layers;
  const auto specs = param_specs(config, Slots{&wte, &wpe, &layers, &ln_f_w, &ln_f_b});
  wte = wte_;
  wpe = wpe_;
  ln_f_w = ln_f_w_;
  ln_f_b = ln_f_b_;
  for (std::size_t i = 0; i < layers.size() && i < layers_.size(); ++i) layers[i] = layers_[i];

  std::vector<SafetensorsEntry> entries;
  for (const ParamSpec& spec : specs) {
    if (*spec.slot == nullptr) return Error(path.string() + ": no tensor for " + spec.name);
    entries.push_back({spec.name, spec.shape});
  }
  static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
  return write_f32_safetensors(path, entries, [&](std::size_t i, std::ostream& out) {
    out.write(reinterpret_cast<const char*>(*specs[i].slot),
              static_cast<std::streamsize>(entries[i].bytes()));
  });
}

}  // namespace kvtier
