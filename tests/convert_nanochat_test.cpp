// Black-box tests of scripts/convert_nanochat.py. The checkpoints are made
// here: tests/data/make_nanochat_base.py writes a nanochat base directory
// (torch.save's format and a pickled tiktoken Encoding, with the standard
// library) from a random nanochat folder (nanochat_test_util.h), so the
// converted folder must compute what that folder computes, bit for bit, and
// its tokenizer must load. Bad input is refused with one line and exit
// status 2, and a hostile pickle does not run.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "daemon_test_util.h"
#include "engine/model/nanochat/nanochat_model.h"
#include "engine/model/safetensors.h"
#include "engine/model/tiktoken_tokenizer.h"
#include "kernels/rotary.h"
#include "nanochat_test_util.h"
#include "test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nanochat_test::NanochatFolder;
using nlohmann::json;

const fs::path kSource = KVTIER_SOURCE_DIR;

class ConvertNanochat : public ::testing::Test {
 protected:
  void SetUp() override {
    if (run({"python3", "--version"}).exit_code != 0)
      GTEST_SKIP() << "python3 is not installed; the converter is not exercised";
  }

  daemon_test::ProcessResult run(std::vector<std::string> args) {
    return daemon_test::run_process(std::move(args), work_.path(),
                                    daemon_test::environment_with({}), "/dev/null", 120s);
  }

  // A base directory made from `folder`, with the maker's extra flags.
  fs::path make_base(const NanochatFolder& folder, std::vector<std::string> flags = {}) {
    const fs::path base = work_.path() / ("base" + std::to_string(bases_++));
    std::vector<std::string> args = {"python3",
                                     (kSource / "tests/data/make_nanochat_base.py").string(),
                                     folder.path().string(), base.string()};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto made = run(args);
    EXPECT_EQ(made.exit_code, 0) << made.err;
    return base;
  }

  daemon_test::ProcessResult convert(const fs::path& base, const fs::path& out,
                                     std::vector<std::string> flags = {}) {
    std::vector<std::string> args = {"python3", (kSource / "scripts/convert_nanochat.py").string(),
                                     base.string(), out.string()};
    args.insert(args.end(), flags.begin(), flags.end());
    return run(args);
  }

  test_util::TempDir work_;
  int bases_ = 0;
};

// Every position's logits of `tokens` through the model in `dir`.
std::vector<float> logits_of(const fs::path& dir, const std::vector<int>& tokens) {
  auto model = NanochatModel::load(dir);
  EXPECT_TRUE(model.has_value()) << model.error();
  if (!model) return {};
  tiers::BlockPool pool(model->kv_layout(16).block_bytes(), 16);
  SequenceKv kv(16);
  EXPECT_TRUE(kv.reserve(pool, static_cast<int>(tokens.size())));
  Model::Chunk chunk{&kv, std::span(tokens), true};
  auto logits = model->forward(std::span(&chunk, 1), pool);
  EXPECT_TRUE(logits.has_value()) << logits.error();
  std::vector<float> out =
      logits ? std::vector<float>(logits->begin(), logits->end()) : std::vector<float>{};
  kv.release(pool);
  return out;
}

TEST_F(ConvertNanochat, EveryGenerationComputesWhatTheCheckpointHolds) {
  std::vector<int> tokens(150);
  for (int i = 0; i < 150; ++i) tokens[i] = (i * 37 + 11) % 300;
  for (const nanochat_test::Shape shape :
       {nanochat_test::Shape{1, 4}, {2, 2}, {3, 4}, {4, 2}, {5, 4}}) {
    NanochatFolder folder(shape);
    const json want = json::parse(test_util::read_file(folder.path() / "config.json"));
    const fs::path base = make_base(folder, {"--compile"});
    const fs::path out = work_.path() / ("out" + std::to_string(shape.generation));
    const auto converted = convert(base, out, {"--rope-table", want["rope_table"]});
    ASSERT_EQ(converted.exit_code, 0) << converted.err;
    EXPECT_TRUE(
        test_util::contains(converted.err, "generation " + std::to_string(shape.generation)));
    const json got = json::parse(test_util::read_file(out / "config.json"));
    EXPECT_EQ(got["generation"], shape.generation);
    EXPECT_EQ(got["converted_from"], json({{"source", "sft"}, {"tag", "d4"}, {"step", 10}}))
        << "the largest tag and step, as nanochat's loader picks";
    for (const char* key :
         {"n_layer", "n_head", "n_kv_head", "n_embd", "vocab_size", "sequence_len", "rope_table"})
      EXPECT_EQ(got[key], want[key]) << key;
    EXPECT_EQ(got.contains("window_pattern"), shape.generation >= 2);
    EXPECT_EQ(got["softcap"], 15.0);

    // The folder's model has no "context" key: compare within sequence_len.
    json same = want;
    same.erase("context");
    test_util::write_file(folder.path() / "config.json", same.dump());
    const std::vector<float> original = logits_of(folder.path(), tokens);
    const std::vector<float> roundtrip = logits_of(out, tokens);
    ASSERT_EQ(original.size(), roundtrip.size());
    EXPECT_EQ(0, std::memcmp(original.data(), roundtrip.data(), original.size() * 4))
        << "generation " << shape.generation;

    // The tokenizer: 291 ranks, nine specials after them, bos ends a text.
    auto config = NanochatConfig::load(out / "config.json");
    ASSERT_TRUE(config.has_value()) << config.error();
    auto tok = Tokenizer::load(config->tokenizer);
    ASSERT_TRUE(tok.has_value()) << tok.error();
    EXPECT_EQ((*tok)->vocab_size(), 300);
    EXPECT_EQ((*tok)->end_of_text(), 291);
    const auto ids = (*tok)->encode("the other <|bos|> tea");
    ASSERT_TRUE(ids.has_value());
    EXPECT_EQ((*tok)->decode(*ids), "the other <|bos|> tea");
    for (int id : *ids) EXPECT_LT(id, 291);
  }
}

TEST_F(ConvertNanochat, Bf16EmbeddingsWidenExactlyAndChooseTheBf16RotaryTable) {
  for (const int generation : {5, 3}) {
    NanochatFolder folder({generation, 2});
    const fs::path out = work_.path() / ("bf16-" + std::to_string(generation));
    const auto converted = convert(make_base(folder, {"--bf16-embeddings"}), out);
    ASSERT_EQ(converted.exit_code, 0) << converted.err;
    EXPECT_EQ(json::parse(test_util::read_file(out / "config.json"))["rope_table"], "bf16");
    auto theirs = SafetensorsFile::open(folder.path() / "model.safetensors");
    auto ours = SafetensorsFile::open(out / "model.safetensors");
    ASSERT_TRUE(theirs && ours);
    const SafetensorsTensor* before = theirs->find("transformer.wte.weight");
    const SafetensorsTensor* after = ours->find("transformer.wte.weight");
    ASSERT_TRUE(before && after);
    EXPECT_EQ(after->dtype, "F32");
    std::vector<float> a(before->elements()), b(after->elements());
    ASSERT_EQ(a.size(), b.size());
    std::memcpy(a.data(), before->data, before->bytes);
    std::memcpy(b.data(), after->data, after->bytes);
    for (std::size_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(b[i], kernels::round_to_bf16(a[i])) << "element " << i;
  }
  // fp32 embeddings from generation 4 on: trained on the CPU, fp32 table.
  NanochatFolder cpu({4, 2});
  const fs::path out = work_.path() / "cpu-g4";
  ASSERT_EQ(convert(make_base(cpu, {"--no-window-pattern"}), out).exit_code, 0);
  const json got = json::parse(test_util::read_file(out / "config.json"));
  EXPECT_EQ(got["rope_table"], "fp32");
  EXPECT_EQ(got["window_pattern"], "L") << "a meta without one is read as nanochat reads it";
}

TEST_F(ConvertNanochat, BadCheckpointsAreRefusedInOneLineAndNothingRuns) {
  NanochatFolder folder({5, 2});
  const fs::path marker = work_.path() / "evil-ran";
  struct Case {
    std::vector<std::string> make;
    std::vector<std::string> convert;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{"--break", "engram"}, {}, "hashed bigram embeddings"},
      {{"--break", "v0"}, {}, "v0_lambdas / value_embed"},
      {{"--break", "missing"}, {}, "missing tensors: 'lm_head.weight'"},
      {{"--break", "meta-layers"},
       {},
       "'resid_lambdas' is [4], the meta's model_config makes it [5]"},
      {{"--break", "vocab"},
       {},
       "292 ranks + 9 special tokens = 301, but the checkpoint's meta says vocab_size 300"},
      {{"--break", "evil-tokenizer", "--evil-marker", marker.string()},
       {},
       "refers to posix.system"},
      {{"--break", "meta-key"}, {}, "keys nanochat's GPTConfig does not: mlp_ratio"},
      {{}, {"--source", "rl"}, "chatrl_checkpoints: no such folder"},
      {{}, {"--tag", "d9"}, "d9: no such tag"},
      {{}, {"--step", "9"}, "meta_000009.json: no such file"},
      {{}, {"--softcap", "-3"}, "argument --softcap: invalid positive_float value"},
  };
  for (const Case& c : cases) {
    const fs::path out = work_.path() / "refused";
    const auto result = convert(make_base(folder, c.make), out, c.convert);
    EXPECT_EQ(result.exit_code, 2) << c.error << ": " << result.err;
    EXPECT_TRUE(test_util::contains(result.err, c.error));
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
    EXPECT_FALSE(fs::exists(out)) << "a refused conversion left " << out;
  }
  EXPECT_FALSE(fs::exists(marker)) << "the evil pickle ran";
}

}  // namespace
}  // namespace kvtier
