#include "engine/model/model_weights.h"

#include <gtest/gtest.h>

#include <bit>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/model/generator.h"
#include "engine/model/gpt2/gpt2_model.h"
#include "engine/model/safetensors.h"
#include "engine/model/sequence_kv.h"
#include "tests/smaps.h"
#include "tests/test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using kernels::WeightLayout;

using test_util::TempDir;
using test_util::Tensor;
using test_util::write_safetensors;  // data 8-byte aligned unless told to misalign it

// A config small enough to write by hand: C = 8, 2 heads, 2 layers, V = 11, T = 5.
ModelConfig tiny_config(WeightLayout layout, bool bias) {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_kv_head = 2;
  c.n_embd = 8;
  c.vocab_size = 11;
  c.block_size = 5;
  c.bias = bias;
  c.weight_layout = layout;
  return c;
}

// The parameter names (without prefix) and file shapes GPT-2 needs, written out
// independently of the loader's own table.
std::vector<std::pair<std::string, std::vector<std::uint64_t>>> expected_params(
    const ModelConfig& c) {
  const std::uint64_t C = c.n_embd;
  const bool oi = c.weight_layout == WeightLayout::kOutIn;
  auto lin = [&](std::uint64_t in, std::uint64_t out) {
    return oi ? std::vector<std::uint64_t>{out, in} : std::vector<std::uint64_t>{in, out};
  };
  std::vector<std::pair<std::string, std::vector<std::uint64_t>>> p;
  p.push_back({"wte.weight", {std::uint64_t(c.vocab_size), C}});
  p.push_back({"wpe.weight", {std::uint64_t(c.block_size), C}});
  for (int i = 0; i < c.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    p.push_back({h + "ln_1.weight", {C}});
    p.push_back({h + "attn.c_attn.weight", lin(C, 3 * C)});
    p.push_back({h + "attn.c_proj.weight", lin(C, C)});
    p.push_back({h + "ln_2.weight", {C}});
    p.push_back({h + "mlp.c_fc.weight", lin(C, 4 * C)});
    p.push_back({h + "mlp.c_proj.weight", lin(4 * C, C)});
    if (c.bias) {
      p.push_back({h + "ln_1.bias", {C}});
      p.push_back({h + "attn.c_attn.bias", {3 * C}});
      p.push_back({h + "attn.c_proj.bias", {C}});
      p.push_back({h + "ln_2.bias", {C}});
      p.push_back({h + "mlp.c_fc.bias", {4 * C}});
      p.push_back({h + "mlp.c_proj.bias", {C}});
    }
  }
  p.push_back({"ln_f.weight", {C}});
  if (c.bias) p.push_back({"ln_f.bias", {C}});
  return p;
}

// F32 bytes whose every element is distinct across the whole file (tensor * 1000 + j),
// so a pointer bound to the wrong tensor or offset cannot go unnoticed.
std::string distinct_floats(std::size_t tensor, std::uint64_t n) {
  std::vector<float> v(n);
  for (std::uint64_t j = 0; j < n; ++j) v[j] = float(tensor * 1000 + j);
  return test_util::as_bytes(v);
}

std::uint64_t product(const std::vector<std::uint64_t>& shape) {
  std::uint64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::vector<Tensor> model_tensors(const ModelConfig& c, const std::string& prefix) {
  std::vector<Tensor> out;
  for (const auto& [name, shape] : expected_params(c)) {
    out.push_back({prefix + name, "F32", shape, distinct_floats(out.size(), product(shape))});
  }
  return out;
}

Tensor* find(std::vector<Tensor>& tensors, const std::string& name) {
  for (Tensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// Every pointer a ModelWeights exposes, by parameter name (without prefix).
std::vector<std::pair<std::string, const float*>> bound_pointers(const ModelWeights& w,
                                                                 const ModelConfig& c) {
  std::vector<std::pair<std::string, const float*>> p = {{"wte.weight", w.wte()},
                                                         {"wpe.weight", w.wpe()},
                                                         {"ln_f.weight", w.ln_f_w()},
                                                         {"ln_f.bias", w.ln_f_b()}};
  for (int i = 0; i < c.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    const LayerWeights& l = w.layer(i);
    p.insert(p.end(), {{h + "ln_1.weight", l.ln_1_w},
                       {h + "ln_1.bias", l.ln_1_b},
                       {h + "attn.c_attn.weight", l.attn_qkv_w},
                       {h + "attn.c_attn.bias", l.attn_qkv_b},
                       {h + "attn.c_proj.weight", l.attn_proj_w},
                       {h + "attn.c_proj.bias", l.attn_proj_b},
                       {h + "ln_2.weight", l.ln_2_w},
                       {h + "ln_2.bias", l.ln_2_b},
                       {h + "mlp.c_fc.weight", l.mlp_fc_w},
                       {h + "mlp.c_fc.bias", l.mlp_fc_b},
                       {h + "mlp.c_proj.weight", l.mlp_proj_w},
                       {h + "mlp.c_proj.bias", l.mlp_proj_b}});
  }
  return p;
}

// Loads `tensors` written to a temp file and checks that every pointer is bound to
// the right bytes of the mapping, and biases are null exactly when the config has none.
void expect_loads(const ModelConfig& c, const std::vector<Tensor>& tensors,
                  const std::string& prefix) {
  TempDir dir;
  const fs::path path = write_safetensors(dir.path() / "model.safetensors", tensors);
  auto w = ModelWeights::load(c, path);
  ASSERT_TRUE(w.has_value()) << w.error();
  std::size_t expected_bytes = 0;
  for (const auto& [name, shape] : expected_params(c)) expected_bytes += product(shape) * 4;
  EXPECT_EQ(w->parameter_bytes(), expected_bytes);

  int checked = 0;
  for (const auto& [name, ptr] : bound_pointers(*w, c)) {
    SCOPED_TRACE(name);
    const bool is_bias = name.ends_with(".bias");
    if (is_bias && !c.bias) {
      EXPECT_EQ(ptr, nullptr);
      continue;
    }
    ASSERT_NE(ptr, nullptr);
    const Tensor* t = nullptr;
    for (const Tensor& candidate : tensors) {
      if (candidate.name == prefix + name) t = &candidate;
    }
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(std::memcmp(ptr, t->data.data(), t->data.size()), 0);
    EXPECT_TRUE(test_util::in_file_mapping(ptr, path)) << "pointer is not into the mapped file";
    ++checked;
  }
  EXPECT_EQ(checked, int(expected_params(c).size()));

  // Moving the weights keeps every pointer (the mapping lives in the pimpl).
  const float* wte = w->wte();
  ModelWeights moved = std::move(*w);
  EXPECT_EQ(moved.wte(), wte);
  EXPECT_TRUE(test_util::in_file_mapping(moved.wte(), path));
}

// Loads `tensors` and expects an error mentioning each of `needles`.
void expect_load_error(const ModelConfig& c, const std::vector<Tensor>& tensors,
                       const std::vector<std::string>& needles, std::size_t misalign = 0) {
  TempDir dir;
  const fs::path path =
      write_safetensors(dir.path() / "model.safetensors", tensors, {.misalign = misalign});
  auto w = ModelWeights::load(c, path);
  ASSERT_FALSE(w.has_value());
  EXPECT_NE(w.error().find(path.string()), std::string::npos) << w.error();
  for (const std::string& needle : needles) {
    EXPECT_NE(w.error().find(needle), std::string::npos)
        << "error '" << w.error() << "' does not mention '" << needle << "'";
  }
}

TEST(ModelWeightsTest, LoadsNanoGptOutIn) {
  const ModelConfig c = tiny_config(WeightLayout::kOutIn, /*bias=*/true);
  auto tensors = model_tensors(c, "transformer.");
  // A tied LM head (same bytes as wte) and nanoGPT's causal-mask buffers are accepted.
  tensors.push_back(
      {"lm_head.weight", "F32", {11, 8}, find(tensors, "transformer.wte.weight")->data});
  tensors.push_back({"transformer.h.0.attn.bias", "F32", {1, 1, 5, 5}, std::string(100, '\0')});
  expect_loads(c, tensors, "transformer.");
}

TEST(ModelWeightsTest, LoadsNanoGptWithoutBiases) {
  const ModelConfig c = tiny_config(WeightLayout::kOutIn, /*bias=*/false);
  expect_loads(c, model_tensors(c, "transformer."), "transformer.");
}

TEST(ModelWeightsTest, LoadsHuggingFaceInOut) {
  const ModelConfig c = tiny_config(WeightLayout::kInOut, /*bias=*/true);
  auto tensors = model_tensors(c, "");
  for (int i = 0; i < c.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i);
    tensors.push_back({h + ".attn.bias", "F32", {1, 1, 5, 5}, std::string(100, '\0')});
    tensors.push_back({h + ".attn.masked_bias", "F32", {}, std::string(4, '\0')});
  }
  expect_loads(c, tensors, "");
}

TEST(ModelWeightsTest, LoadsHuggingFaceWithTransformerPrefix) {
  const ModelConfig c = tiny_config(WeightLayout::kInOut, /*bias=*/true);
  expect_loads(c, model_tensors(c, "transformer."), "transformer.");
}

TEST(ModelWeightsTest, LoadsNanoGptNamesInOutLayout) {
  const ModelConfig c = tiny_config(WeightLayout::kInOut, /*bias=*/false);
  expect_loads(c, model_tensors(c, "transformer."), "transformer.");
}

TEST(ModelWeightsTest, OrientationComesFromTheConfig) {
  // A file written out_in, read with an in_out config: every non-square matrix mismatches.
  const ModelConfig out_in = tiny_config(WeightLayout::kOutIn, true);
  const ModelConfig in_out = tiny_config(WeightLayout::kInOut, true);
  expect_load_error(in_out, model_tensors(out_in, ""),
                    {"tensor 'h.0.attn.c_attn.weight': shape [24, 8], expected [8, 24]",
                     "weight_layout in_out", "h.1.mlp.c_fc.weight"});
  expect_load_error(out_in, model_tensors(in_out, "transformer."),
                    {"'transformer.h.0.attn.c_attn.weight': shape [8, 24], expected [24, 8]",
                     "weight_layout out_in"});
}

TEST(ModelWeightsTest, RejectsMultiQueryConfigs) {
  ModelConfig c = tiny_config(WeightLayout::kOutIn, true);
  const auto tensors = model_tensors(c, "transformer.");
  c.n_kv_head = 1;
  expect_load_error(c, tensors, {"n_kv_head"});
}

TEST(ModelWeightsTest, RejectsMissingTensors) {
  const ModelConfig c = tiny_config(WeightLayout::kOutIn, true);
  auto tensors = model_tensors(c, "transformer.");
  std::erase_if(tensors, [](const Tensor& t) {
    return t.name == "transformer.h.1.mlp.c_fc.bias" || t.name == "transformer.ln_f.weight";
  });
  expect_load_error(
      c, tensors, {"missing tensors: 'transformer.h.1.mlp.c_fc.bias', 'transformer.ln_f.weight'"});
}

TEST(ModelWeightsTest, ListsAtMostEightMissingTensors) {
  const ModelConfig c = tiny_config(WeightLayout::kOutIn, true);
  std::vector<Tensor> tensors = {model_tensors(c, "")[0]};  // wte only
  const std::size_t total = expected_params(c).size();
  expect_load_error(c, tensors, {"(and " + std::to_string(total - 1 - 8) + " more)"});
}

TEST(ModelWeightsTest, RejectsMissingEmbedding) {
  const ModelConfig c = tiny_config(WeightLayout::kOutIn, true);
  auto tensors = model_tensors(c, "transformer.");
  std::erase_if(tensors, [](const Tensor& t) { return t.name == "transformer.wte.weight"; });
  expect_load_error(c, tensors, {"'transformer.wte.weight' or 'wte.weight'"});
}

TEST(ModelWeightsTest, RejectsAmbiguousNaming) {
  const ModelConfig c = tiny_config(WeightLayout::kOutIn, true);
  auto tensors = model_tensors(c, "transformer.");
  tensors.push_back(model_tensors(c, "")[0]);
  expect_load_error(c, tensors, {"both"});
}

TEST(ModelWeightsTest, RejectsUnexpectedTensors) {
  const ModelConfig c = tiny_config(WeightLayout::kOutIn, true);
  auto tensors = model_tensors(c, "transformer.");
  tensors.push_back({"transformer.h.2.ln_1.weight", "F32", {8}, std::string(32, '\0')});
  tensors.push_back({"transformer.h.2.attn.bias", "F32", {1}, std::string(4, '\0')});  // no layer 2
  tensors.push_back({"optimizer.step", "I64", {}, std::string(8, '\0')});
  expect_load_error(c, tensors,
                    {"unexpected tensors: 'optimizer.step', 'transformer.h.2.attn.bias', "
                     "'transformer.h.2.ln_1.weight'"});
}

TEST(ModelWeightsTest, RejectsBiasesWhenConfigHasNone) {
  const ModelConfig with = tiny_config(WeightLayout::kOutIn, true);
  const ModelConfig without = tiny_config(WeightLayout::kOutIn, false);
  expect_load_error(
      without, model_tensors(with, "transformer."),
      {"unexpected tensors:", "'transformer.h.0.attn.c_attn.bias'", "'transformer.h.0.ln_1.bias'"});
  // And the other way round: a bias config needs every bias.
  expect_load_error(with, model_tensors(without, "transformer."),
                    {"missing tensors:", "'transformer.h.0.attn.c_attn.bias'"});
}

TEST(ModelWeightsTest, RejectsNonFloatTensors) {
  const ModelConfig c = tiny_config(WeightLayout::kOutIn, true);
  auto tensors = model_tensors(c, "transformer.");
  Tensor* ln = find(tensors, "transformer.h.0.ln_1.weight");
  ln->dtype = "F64";
  ln->data.resize(64);
  Tensor* wpe = find(tensors, "transformer.wpe.weight");
  wpe->dtype = "I64";
  wpe->data.resize(5 * 8 * 8);
  expect_load_error(c, tensors,
                    {"tensor 'transformer.h.0.ln_1.weight': dtype F64, only F32, F16 and BF16 "
                     "are supported",
                     "tensor 'transformer.wpe.weight': dtype I64"});
}

// F16 and BF16 tensors, alone or beside F32 ones, are widened to fp32 in a
// buffer of their own: exactly, whatever the alignment in the file.
TEST(ModelWeightsTest, LoadsF16AndBf16TensorsWidenedToF32) {
  const ModelConfig c = tiny_config(WeightLayout::kInOut, true);
  for (const std::string mix : {"F16", "BF16", "mixed"}) {
    SCOPED_TRACE(mix);
    std::vector<Tensor> tensors = model_tensors(c, "");
    std::vector<std::vector<float>> expected;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      Tensor& t = tensors[i];
      const std::uint64_t n = product(t.shape);
      const std::string dtype = mix != "mixed" ? mix
                                : i % 3 == 0   ? "F32"
                                : i % 3 == 1   ? "F16"
                                               : "BF16";
      std::vector<float> values(n);
      std::vector<std::uint16_t> bits(n);
      for (std::uint64_t j = 0; j < n; ++j) {  // j < 1024: it fits every mantissa
        if (dtype == "F16") {
          // Exponent field 4 + i % 16, mantissa j: (1 + j / 1024) * 2^(i % 16 - 11).
          bits[j] = static_cast<std::uint16_t>(((4 + i % 16) << 10) | j);
          values[j] = std::ldexp(1.0f + float(j) / 1024.0f, int(i % 16) - 11);
        } else if (dtype == "BF16") {
          bits[j] = static_cast<std::uint16_t>(0xC000 + i * 256 + j);  // negative, finite
          values[j] = std::bit_cast<float>(std::uint32_t{bits[j]} << 16);
        } else {
          values[j] = float(i * 1000 + j);
        }
      }
      t.dtype = dtype;
      t.data = dtype == "F32" ? test_util::as_bytes(values) : test_util::as_bytes(bits);
      expected.push_back(values);
    }
    // Half-precision data is read wherever it lies; F32 data is used in place,
    // so a file with F32 tensors keeps them aligned.
    TempDir dir;
    const fs::path path = write_safetensors(dir.path() / "model.safetensors", tensors,
                                            {.misalign = mix == "mixed" ? 0u : 2u});
    auto w = ModelWeights::load(c, path);
    ASSERT_TRUE(w.has_value()) << w.error();
    EXPECT_EQ(w->parameter_bytes(), ModelWeights::random(c, 0).parameter_bytes());
    const auto pointers = bound_pointers(*w, c);
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      SCOPED_TRACE(tensors[i].name);
      const float* ptr = nullptr;
      for (const auto& [name, p] : pointers) {
        if (name == tensors[i].name) ptr = p;
      }
      ASSERT_NE(ptr, nullptr);
      EXPECT_EQ(std::memcmp(ptr, expected[i].data(), expected[i].size() * sizeof(float)), 0);
      EXPECT_EQ(test_util::in_file_mapping(ptr, path), tensors[i].dtype == "F32");
    }
  }
}

TEST(ModelWeightsTest, RejectsWrongShapes) {
  const ModelConfig c = tiny_config(WeightLayout::kOutIn, true);
  auto tensors = model_tensors(c, "transformer.");
  find(tensors, "transformer.wpe.weight")->shape = {8, 5};  // same bytes, transposed
  Tensor* bias = find(tensors, "transformer.h.1.attn.c_attn.bias");
  bias->shape = {3, 8};
  expect_load_error(c, tensors,
                    {"'transformer.wpe.weight': shape [8, 5], expected [5, 8]",
                     "'transformer.h.1.attn.c_attn.bias': shape [3, 8], expected [24]"});
}

TEST(ModelWeightsTest, RejectsMisalignedData) {
  const ModelConfig c = tiny_config(WeightLayout::kOutIn, true);
  expect_load_error(c, model_tensors(c, "transformer."), {"not 4-byte aligned"}, /*misalign=*/2);
  // One byte of padding is a misaligned tensor too; a multiple of 4 is fine.
  expect_load_error(c, model_tensors(c, "transformer."), {"not 4-byte aligned"}, 1);
  TempDir dir;
  const fs::path path = write_safetensors(dir.path() / "m.safetensors",
                                          model_tensors(c, "transformer."), {.misalign = 4});
  auto w = ModelWeights::load(c, path);
  EXPECT_TRUE(w.has_value()) << w.error();
}

TEST(ModelWeightsTest, RejectsUntiedLmHead) {
  const ModelConfig c = tiny_config(WeightLayout::kInOut, true);
  auto tensors = model_tensors(c, "");
  std::string head = find(tensors, "wte.weight")->data;
  head[5] ^= 1;  // one bit differs
  tensors.push_back({"lm_head.weight", "F32", {11, 8}, head});
  expect_load_error(c, tensors, {"untied lm_head.weight is not supported"});

  tensors.back() = {"lm_head.weight", "F32", {8, 11}, find(tensors, "wte.weight")->data};
  expect_load_error(c, tensors, {"untied lm_head.weight is not supported"});
}

TEST(ModelWeightsTest, ReportsFileErrorsWithThePath) {
  const ModelConfig c = tiny_config(WeightLayout::kOutIn, true);
  TempDir dir;
  auto missing = ModelWeights::load(c, dir.path() / "none.safetensors");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().find("none.safetensors"), std::string::npos) << missing.error();

  const fs::path path = write_safetensors(dir.path() / "m.safetensors", model_tensors(c, ""));
  fs::resize_file(path, fs::file_size(path) - 4);
  auto truncated = ModelWeights::load(c, path);
  ASSERT_FALSE(truncated.has_value());
  EXPECT_NE(truncated.error().find("beyond data size"), std::string::npos) << truncated.error();
}

// Every random tensor pointer by name, with its element count.
std::vector<std::pair<std::string, std::vector<float>>> random_values(const ModelConfig& c,
                                                                      std::uint64_t seed) {
  const ModelWeights w = ModelWeights::random(c, seed);
  std::vector<std::pair<std::string, std::vector<float>>> out;
  const auto ptrs = bound_pointers(w, c);
  for (const auto& [name, shape] : expected_params(c)) {
    for (const auto& [pname, ptr] : ptrs) {
      if (pname != name) continue;
      out.push_back({name, std::vector<float>(ptr, ptr + product(shape))});
    }
  }
  return out;
}

TEST(ModelWeightsTest, RandomIsDeterministicPerSeed) {
  const ModelConfig c = tiny_config(WeightLayout::kInOut, true);
  const auto a = random_values(c, 1234);
  const auto b = random_values(c, 1234);
  const auto other = random_values(c, 1235);
  ASSERT_EQ(a.size(), expected_params(c).size());
  EXPECT_EQ(a, b);
  int differing = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].second != other[i].second) ++differing;
  }
  // All but the LayerNorm tensors (constant 1 and 0) change with the seed.
  EXPECT_EQ(differing, 2 + c.n_layer * 8);
  // No two tensors share a stream.
  EXPECT_NE(a[0].second[0], a[1].second[0]);
}

TEST(ModelWeightsTest, RandomValuesAreTheSameOnEveryMachine) {
  // Pinned values: a different compiler, libm or instruction set must not change them.
  // (Changing the generator on purpose changes them too; then update the pin.)
  const ModelConfig c = tiny_config(WeightLayout::kInOut, true);
  const auto v = random_values(c, 42);
  const std::vector<float>& wte = v[0].second;
  std::ostringstream got;
  got << std::hexfloat << wte[0] << " " << wte[1] << " " << wte[87];
  EXPECT_EQ(got.str(), "0x1.9a6066p-7 -0x1.c53844p-7 -0x1.4520bep-11");
}

TEST(ModelWeightsTest, RandomInitialisation) {
  ModelConfig c = tiny_config(WeightLayout::kOutIn, true);
  c.vocab_size = 4096;  // enough samples for the statistics below
  const ModelWeights w = ModelWeights::random(c, 7);
  const std::size_t n = std::size_t(c.vocab_size) * c.n_embd;
  double sum = 0, sum2 = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sum += w.wte()[i];
    sum2 += double(w.wte()[i]) * w.wte()[i];
  }
  const double mean = sum / n, stddev = std::sqrt(sum2 / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.001);
  EXPECT_NEAR(stddev, 0.02, 0.0005);
  for (int i = 0; i < c.n_embd; ++i) {
    EXPECT_EQ(w.layer(1).ln_2_w[i], 1.0f);
    EXPECT_EQ(w.layer(1).ln_2_b[i], 0.0f);
    EXPECT_EQ(w.ln_f_w()[i], 1.0f);
  }
  EXPECT_NE(w.layer(0).mlp_fc_b[0], 0.0f);
  EXPECT_LT(std::abs(w.layer(0).mlp_fc_b[0]), 0.1f);
  for (const auto& [name, ptr] : bound_pointers(w, c)) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(ptr) % 64, 0u) << name;
  }
}

TEST(ModelWeightsTest, RandomWithoutBiasesLeavesThemNull) {
  const ModelConfig c = tiny_config(WeightLayout::kOutIn, false);
  const ModelWeights w = ModelWeights::random(c, 1);
  // A tensor's values depend on its name and the seed only, not on the other tensors.
  const ModelWeights with_bias = ModelWeights::random(tiny_config(WeightLayout::kOutIn, true), 1);
  EXPECT_EQ(std::memcmp(w.layer(1).mlp_fc_w, with_bias.layer(1).mlp_fc_w, 8 * 32 * 4), 0);
  EXPECT_EQ(w.layer(0).attn_qkv_b, nullptr);
  EXPECT_EQ(w.layer(1).ln_1_b, nullptr);
  EXPECT_EQ(w.ln_f_b(), nullptr);
  EXPECT_NE(w.layer(1).mlp_proj_w, nullptr);
}

TEST(ModelWeightsTest, RandomServesGroupedQueryConfigs) {
  ModelConfig c = tiny_config(WeightLayout::kOutIn, true);
  const std::size_t mha_bytes = ModelWeights::random(c, 3).parameter_bytes();
  c.n_kv_head = 1;  // kv_dim 4: c_attn is 8 -> 16 instead of 8 -> 24
  const ModelWeights w = ModelWeights::random(c, 3);
  const std::size_t narrower = std::size_t(c.n_layer) * (8 * 8 + 8) * sizeof(float);
  EXPECT_EQ(w.parameter_bytes(), mha_bytes - narrower);
  EXPECT_NE(w.layer(1).attn_qkv_b, nullptr);
}

// save() writes a file load() reads back bit-identical, used in place from
// the mapping, in either orientation, with and without biases.
TEST(ModelWeightsTest, SavedRandomWeightsLoadBackIdentical) {
  for (const auto layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
    for (const bool bias : {true, false}) {
      SCOPED_TRACE(std::string(layout == WeightLayout::kOutIn ? "out_in" : "in_out") +
                   (bias ? " with biases" : " without biases"));
      const ModelConfig c = tiny_config(layout, bias);
      const ModelWeights w = ModelWeights::random(c, 77);
      TempDir dir;
      const fs::path path = dir.path() / "model.safetensors";
      ASSERT_TRUE(w.save(c, path).has_value());
      auto loaded = ModelWeights::load(c, path);
      ASSERT_TRUE(loaded.has_value()) << loaded.error();
      EXPECT_EQ(loaded->parameter_bytes(), w.parameter_bytes());
      const auto want = bound_pointers(w, c);
      const auto got = bound_pointers(*loaded, c);
      const auto params = expected_params(c);
      for (const auto& [name, shape] : params) {
        SCOPED_TRACE(name);
        const float* a = nullptr;
        const float* b = nullptr;
        for (std::size_t i = 0; i < want.size(); ++i)
          if (want[i].first == name) a = want[i].second, b = got[i].second;
        ASSERT_NE(a, nullptr);
        ASSERT_NE(b, nullptr);
        EXPECT_EQ(std::memcmp(a, b, product(shape) * sizeof(float)), 0);
        EXPECT_TRUE(test_util::in_file_mapping(b, path));
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b) % 64, 0u);
      }
      // Hugging Face names, no others.
      auto file = SafetensorsFile::open(path);
      ASSERT_TRUE(file.has_value()) << file.error();
      EXPECT_EQ(file->size(), params.size());
      EXPECT_NE(file->find("h.1.mlp.c_proj.weight"), nullptr);
    }
  }
}

TEST(ModelWeightsTest, SaveNamesAPathItCannotWrite) {
  const ModelConfig c = tiny_config(WeightLayout::kOutIn, true);
  const auto saved = ModelWeights::random(c, 1).save(c, "/nonexistent-kvtier-dir/m.safetensors");
  ASSERT_FALSE(saved.has_value());
  EXPECT_NE(saved.error().find("/nonexistent-kvtier-dir/m.safetensors"), std::string::npos)
      << saved.error();
}

TEST(ModelWeightsTest, RandomGpt2_124m) {
  const ModelConfig c = ModelConfig::gpt2_124m();
  const auto start = std::chrono::steady_clock::now();
  const ModelWeights w = ModelWeights::random(c, 0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("random gpt2_124m: %.2f s\n", seconds);
  // GPT-2 small has 124,439,808 parameters with the LM head tied to wte.
  EXPECT_EQ(w.parameter_bytes(), std::size_t{124439808} * 4);
  ASSERT_NE(w.wte(), nullptr);
  EXPECT_NE(w.layer(11).mlp_proj_w, nullptr);
  // The last element of the largest tensor was written, and is small.
  const float last = w.wte()[std::size_t(c.vocab_size) * c.n_embd - 1];
  EXPECT_LT(std::abs(last), 0.2f);
  EXPECT_NE(last, 0.0f);
}

// fp32 bits rounded to the nearest BF16 (ties to even), as that BF16's bits.
// The weights are finite, so no NaN needs care.
std::uint16_t round_to_bf16(float x) {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  return static_cast<std::uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// The F16 nearest to x (ties away from zero) and its bits, from the format's
// fields: 1 sign, 5 exponent (bias 15), 10 mantissa bits. REQUIRES: |x| < 65504.
std::pair<std::uint16_t, float> round_to_f16(float x) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::abs(double(x));
  if (a < 0x1p-14) {  // subnormal: a multiple of 2^-24 (1024 of them is the smallest normal)
    const auto m = static_cast<std::uint16_t>(std::round(a * 0x1p24));
    return {static_cast<std::uint16_t>(sign | m), float(std::copysign(m * 0x1p-24, x))};
  }
  int e = 0;
  const double fraction = std::frexp(a, &e);  // a = fraction * 2^e, fraction in [0.5, 1)
  auto m = static_cast<std::uint32_t>(std::round((fraction * 2 - 1) * 1024));
  int exponent = e - 1;
  if (m == 1024) m = 0, ++exponent;  // rounded up to the next power of two
  const auto bits = static_cast<std::uint16_t>(sign | ((exponent + 15) << 10) | m);
  return {bits, float(std::copysign(std::ldexp(1 + m / 1024.0, exponent), x))};
}

// The bundled model saved twice: in F32 with every weight rounded to what
// F16 or BF16 can hold, and in that dtype itself. Both must load and produce
// the same logits and greedy tokens, bit for bit.
TEST(ModelWeightsTest, HalfPrecisionFilesGenerateLikeTheirF32Twin) {
  const fs::path bundled = fs::path(KVTIER_SOURCE_DIR) / "models/fortunes-char";
  auto source = SafetensorsFile::open(bundled / "model.safetensors");
  ASSERT_TRUE(source.has_value()) << source.error();
  for (const std::string dtype : {"F16", "BF16"}) {
    SCOPED_TRACE(dtype);
    std::vector<Tensor> rounded_f32, half;
    for (const std::string& name : source->names()) {
      const SafetensorsTensor& t = *source->find(name);
      ASSERT_EQ(t.dtype, "F32") << name;
      std::vector<float> values(t.elements());
      std::memcpy(values.data(), t.data, t.bytes);
      std::vector<std::uint16_t> bits(values.size());
      for (std::size_t i = 0; i < values.size(); ++i) {
        if (dtype == "BF16") {
          bits[i] = round_to_bf16(values[i]);
          values[i] = std::bit_cast<float>(std::uint32_t{bits[i]} << 16);
        } else {
          std::tie(bits[i], values[i]) = round_to_f16(values[i]);
        }
      }
      rounded_f32.push_back({name, "F32", t.shape, test_util::as_bytes(values)});
      half.push_back({name, dtype, t.shape, test_util::as_bytes(bits)});
    }
    TempDir f32_dir, half_dir;
    for (const TempDir* dir : {&f32_dir, &half_dir}) {
      fs::copy_file(bundled / "config.json", dir->path() / "config.json");
    }
    write_safetensors(f32_dir.path() / "model.safetensors", rounded_f32);
    write_safetensors(half_dir.path() / "model.safetensors", half);
    EXPECT_LT(fs::file_size(half_dir.path() / "model.safetensors"),
              fs::file_size(f32_dir.path() / "model.safetensors") * 6 / 10);

    std::vector<std::vector<int>> generated;
    std::vector<std::vector<float>> logits;
    for (const TempDir* dir : {&f32_dir, &half_dir}) {
      auto model = Gpt2Model::load(dir->path());
      ASSERT_TRUE(model.has_value()) << model.error();
      tiers::BlockPool pool(model->kv_layout(16).block_bytes(), 32);
      const std::vector<int> prompt = {43, 27, 1, 62, 70, 59, 72, 1, 67, 73};
      SequenceKv kv(16);
      ASSERT_TRUE(kv.reserve(pool, static_cast<int>(prompt.size())));
      const Model::Chunk chunk{&kv, prompt, true};
      auto out = model->forward(std::span(&chunk, 1), pool);
      ASSERT_TRUE(out.has_value()) << out.error();
      logits.emplace_back(out->begin(), out->end());
      kv.release(pool);
      GenerateOptions options;
      options.sampling.temperature = 0.0f;
      options.max_tokens = 48;
      auto generation = generate(*model, pool, nullptr, prompt, options);
      ASSERT_TRUE(generation.has_value()) << generation.error();
      generated.push_back(generation->tokens);
    }
    EXPECT_EQ(test_util::as_bytes(logits[0]), test_util::as_bytes(logits[1]));
    EXPECT_EQ(generated[0], generated[1]);
    EXPECT_EQ(generated[0].size(), 48u);
  }
}

// The model files the project ships and its test fixtures, when they exist.
class RealModelTest : public ::testing::TestWithParam<const char*> {};

TEST_P(RealModelTest, Loads) {
  const fs::path dir = fs::path(KVTIER_SOURCE_DIR) / GetParam();
  if (!fs::exists(dir / "config.json") || !fs::exists(dir / "model.safetensors")) {
    GTEST_SKIP() << dir << " has no config.json + model.safetensors yet";
  }
  auto config = ModelConfig::load(dir / "config.json");
  ASSERT_TRUE(config.has_value()) << config.error();
  auto w = ModelWeights::load(*config, dir / "model.safetensors");
  ASSERT_TRUE(w.has_value()) << w.error();
  EXPECT_TRUE(test_util::in_file_mapping(w->wte(), dir / "model.safetensors"));
  EXPECT_GT(w->parameter_bytes(), std::size_t(config->vocab_size) * config->n_embd * 4);
  for (int i = 0; i < config->n_layer; ++i) EXPECT_NE(w->layer(i).mlp_proj_w, nullptr);
}

// Once released, the mapped file leaves the resident set and its pointers
// still read the same bytes (faulted back from the page cache). A Model
// releases it after packing its matrices.
TEST(ModelWeights, ReleasedPagesLeaveTheResidentSetAndReadTheSame) {
  const fs::path dir = fs::path(KVTIER_SOURCE_DIR) / "models/fortunes-char";
  auto config = ModelConfig::load(dir / "config.json");
  ASSERT_TRUE(config.has_value()) << config.error();
  auto w = ModelWeights::load(*config, dir / "model.safetensors");
  ASSERT_TRUE(w.has_value()) << w.error();
  const std::size_t wte_floats = std::size_t(config->vocab_size) * config->n_embd;
  const std::vector<float> before(w->wte(), w->wte() + wte_floats);
  const long file_kb = long(fs::file_size(dir / "model.safetensors") / 1024);
  const long touched = test_util::resident_kb_of_mapping(w->wte());
  w->release_resident_pages();
  const long released = test_util::resident_kb_of_mapping(w->wte());
  ASSERT_GE(released, 0) << "the mapping is not in /proc/self/smaps";
  EXPECT_LT(released, touched) << "file " << file_kb << " kB";
  EXPECT_LT(released, file_kb / 4) << "touched " << touched << " kB";
  EXPECT_EQ(std::memcmp(before.data(), w->wte(), wte_floats * sizeof(float)), 0);

  auto model = Gpt2Model::load(dir);
  ASSERT_TRUE(model.has_value()) << model.error();
  EXPECT_LT(test_util::resident_kb_of_mapping(model->weights().wte()), file_kb / 4)
      << "the Model kept the file resident after packing";
}

INSTANTIATE_TEST_SUITE_P(Bundled, RealModelTest,
                         ::testing::Values("models/fortunes-char", "models/fortunes-char-5m",
                                           "tests/data/tiny-nanogpt", "tests/data/tiny-hf"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::erase_if(name, [](char ch) { return !std::isalnum(ch); });
                           return name;
                         });

}  // namespace
}  // namespace kvtier
