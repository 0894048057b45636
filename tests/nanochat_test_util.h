// A nanochat model folder of random weights and a small tokenizer, as
// scripts/convert_nanochat.py writes one, for the tests of the nanochat family.
#pragma once

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cmath>
#include <expected>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "test_util.h"

namespace kvtier::nanochat_test {

struct Shape {
  int generation;
  int n_kv_head;
};

// Every generation, at n_kv_head < n_head and =.
inline constexpr Shape kShapes[] = {{1, 4}, {2, 2}, {3, 4}, {4, 2}, {5, 4}, {5, 1}};

inline std::string shape_name(Shape s) {
  return "G" + std::to_string(s.generation) + " n_kv_head " + std::to_string(s.n_kv_head);
}

// n token ids of the folders' vocabulary (300), from `seed`.
inline std::vector<int> random_tokens(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> id(0, 299);
  std::vector<int> out(n);
  for (int& t : out) t = id(rng);
  return out;
}

// A forward pass as the tests call it: the model's own, or a GPU Device's.
using Forward = std::function<std::expected<std::span<const float>, std::string>(
    std::span<const Model::Chunk>, tiers::BlockPool&)>;

// Every position's logits of `tokens`, run through `forward` over `pool` in
// chunks of the given sizes (cycled), each chunk naming the token before
// it; empty (and the test failed with the forward's message) if a pass
// fails.
inline std::vector<float> run_chunked(const Forward& forward, tiers::BlockPool& pool, int page_size,
                                      const std::vector<int>& tokens,
                                      const std::vector<int>& sizes) {
  SequenceKv kv(page_size);
  EXPECT_TRUE(kv.reserve(pool, static_cast<int>(tokens.size())));
  std::vector<float> out;
  for (std::size_t at = 0, i = 0; at < tokens.size(); ++i) {
    const std::size_t n = std::min<std::size_t>(sizes[i % sizes.size()], tokens.size() - at);
    Model::Chunk chunk{&kv, std::span(tokens).subspan(at, n), true};
    chunk.previous_token = at == 0 ? -1 : tokens[at - 1];
    auto logits = forward(std::span(&chunk, 1), pool);
    EXPECT_TRUE(logits.has_value()) << logits.error();
    if (!logits) {
      out.clear();
      break;
    }
    out.insert(out.end(), logits->begin(), logits->end());
    at += n;
  }
  kv.release(pool);
  return out;
}

// A model folder of random weights: 4 layers, 4 heads of 16 (by default), vocabulary 300
// padded to 320, sequence_len 256 (every generation's short window is then
// 128) and a context of 320, so both kinds of window cut in on the
// sequences below.
class NanochatFolder {
 public:
  // A model whose greedy next token is a function of the current token
  // alone: successor[a] = b makes b the argmax after a (for the tokens the
  // map names; others get no clear winner). The blocks' output projections
  // are zero, so x stays norm(wte[id]) to the head, whose row for b is
  // norm(wte[a]) scaled: a real forward with weights chosen to script what
  // the model writes (a tool call, say). Generation 1.
  using Successors = std::map<int, int>;
  static NanochatFolder scripted(const Successors& successor) {
    return NanochatFolder({1, 4}, 64, &successor);
  }

  // n_embd 64 by default; wider where a test needs prefill to cost more
  // than reading blocks back (the cost model loads only then).
  explicit NanochatFolder(Shape shape, int n_embd = 64, const Successors* successor = nullptr)
      : shape_(shape) {
    const int L = 4, H = 4, C = n_embd, D = C / H, V = 300, Vp = 320;
    const int KV = shape.n_kv_head * D, g = shape.generation;
    nlohmann::json config = {{"format", "nanochat"},
                             {"generation", g},
                             {"n_layer", L},
                             {"n_head", H},
                             {"n_kv_head", shape.n_kv_head},
                             {"n_embd", C},
                             {"vocab_size", V},
                             {"sequence_len", 256},
                             {"context", 320},
                             {"window_pattern", "SSL"},
                             {"softcap", 15},
                             {"rope_table", g % 2 ? "bf16" : "fp32"}};
    // The tokenizer: 256 byte ranks and 35 common pairs, nanochat's pattern
    // and its nine special tokens after them: 300 ids.
    std::string ranks;
    const char* pairs[] = {"th", "he", "in", "er", "an", " t", " a", "re", "on", "at", "en", "nd",
                           "ti", "es", "or", "te", "of", "ed", "is", "it", "al", "ar", "st", "to",
                           "nt", "ng", "se", "ha", "as", "ou", "io", "le", "ve", "co", "me"};
    int rank = 0;
    auto add_rank = [&](std::string_view bytes) {
      std::string b64(4 * ((bytes.size() + 2) / 3), '\0');
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()),
                      reinterpret_cast<const unsigned char*>(bytes.data()),
                      static_cast<int>(bytes.size()));
      ranks += b64 + " " + std::to_string(rank++) + "\n";
    };
    for (int b = 0; b < 256; ++b) add_rank(std::string(1, static_cast<char>(b)));
    for (const char* pair : pairs) add_rank(pair);
    dir_.write("tokenizer.tiktoken", ranks);
    nlohmann::json specials = nlohmann::json::object();
    for (const char* name :
         {"<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>",
          "<|python_start|>", "<|python_end|>", "<|output_start|>", "<|output_end|>"})
      specials[name] = rank++;
    config["tokenizer"] = {
        {"type", "tiktoken"},
        {"ranks", "tokenizer.tiktoken"},
        {"pattern",
         R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)"},
        {"special_tokens", specials}};
    dir_.write("config.json", config.dump(2));
    std::mt19937 rng(1000 + g * 10 + shape.n_kv_head);
    std::vector<test_util::Tensor> tensors;
    auto add = [&](const std::string& name, std::vector<std::uint64_t> shape_of, double stddev,
                   double mean = 0.0) {
      std::size_t n = 1;
      for (auto d : shape_of) n *= d;
      std::normal_distribution<float> normal(static_cast<float>(mean), static_cast<float>(stddev));
      std::vector<float> values(n);
      for (float& v : values) v = normal(rng);
      tensors.push_back({name, "F32", shape_of, test_util::as_bytes(values)});
    };
    const auto linear = [&](const std::string& name, int out, int in) {
      add(name, {std::uint64_t(out), std::uint64_t(in)}, 1.0 / std::sqrt(in));
    };
    add("transformer.wte.weight", {Vp, std::uint64_t(C)}, 1.0);
    for (int i = 0; i < L; ++i) {
      const std::string h = "transformer.h." + std::to_string(i) + ".";
      linear(h + "attn.c_q.weight", C, C);
      linear(h + "attn.c_k.weight", KV, C);
      linear(h + "attn.c_v.weight", KV, C);
      linear(h + "attn.c_proj.weight", C, C);
      linear(h + "mlp.c_fc.weight", 4 * C, C);
      linear(h + "mlp.c_proj.weight", C, 4 * C);
      if (g >= 3 && i % 2 == (L - 1) % 2) {
        linear(h + "attn.ve_gate.weight", shape.n_kv_head, g >= 4 ? 12 : 32);
        add("value_embeds." + std::to_string(i) + ".weight", {Vp, std::uint64_t(KV)}, 0.5);
      }
    }
    add("lm_head.weight", {Vp, std::uint64_t(C)}, 2.0 / std::sqrt(C));
    if (successor != nullptr) script(tensors, *successor, C, Vp);
    if (g >= 2) {
      add("resid_lambdas", {std::uint64_t(L)}, 0.2, 1.0);
      add("x0_lambdas", {std::uint64_t(L)}, 0.2, 0.1);
    }
    if (g >= 5) {
      add("smear_lambda", {1}, 0.1, 0.5);
      add("backout_lambda", {1}, 0.1, 0.3);
      linear("smear_gate.weight", 1, 24);
    }
    test_util::write_safetensors(dir_.path() / "model.safetensors", tensors);
  }

  const std::filesystem::path& path() const { return dir_.path(); }
  Shape shape() const { return shape_; }

 private:
  static void script(std::vector<test_util::Tensor>& tensors, const Successors& successor, int C,
                     int Vp) {
    auto floats = [&](const std::string& name) {
      for (test_util::Tensor& t : tensors)
        if (t.name == name)
          return std::span(reinterpret_cast<float*>(t.data.data()), t.data.size() / sizeof(float));
      throw std::runtime_error("no tensor " + name);
    };
    for (test_util::Tensor& t : tensors)
      if (t.name.ends_with("attn.c_proj.weight") || t.name.ends_with("mlp.c_proj.weight"))
        std::fill(t.data.begin(), t.data.end(), '\0');
    const auto wte = floats("transformer.wte.weight");
    const auto head = floats("lm_head.weight");
    std::fill(head.begin(), head.end(), 0.0f);
    for (const auto& [a, b] : successor) {
      if (a >= Vp || b >= Vp) throw std::runtime_error("a scripted token past the vocabulary");
      double sum = 0;
      for (int i = 0; i < C; ++i) sum += double(wte[a * C + i]) * wte[a * C + i];
      const double rms = std::sqrt(sum / C);
      for (int i = 0; i < C; ++i)
        head[b * C + i] += static_cast<float>(0.05 * wte[a * C + i] / rms);
    }
  }

  test_util::TempDir dir_;
  Shape shape_;
};

}  // namespace kvtier::nanochat_test
