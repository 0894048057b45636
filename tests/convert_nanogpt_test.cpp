// Black-box tests of scripts/convert_nanogpt.py, the nanoGPT checkpoint
// converter. The checkpoints are made here: tests/data/make_nanogpt_ckpt.py
// writes torch.save's format with the standard library from a bundled model's
// weights, so the converted folder must hold those weights bit for bit and
// make kvtierd generate what the bundled model does. Where `import torch`
// works, tests/data/torch_nanogpt_ckpt.py also checks both directions
// against the real torch.save and torch.load. Bad input must be refused with
// one line and exit status 2, and a hostile pickle must not run.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon_test_util.h"
#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"
#include "test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const fs::path kSource = KVTIER_SOURCE_DIR;
const fs::path kConverter = kSource / "scripts/convert_nanogpt.py";
const fs::path kMaker = kSource / "tests/data/make_nanogpt_ckpt.py";
const fs::path kTorchHelper = kSource / "tests/data/torch_nanogpt_ckpt.py";
const fs::path kCharModel = kSource / "models/fortunes-char";
// 2 layers, 32 wide, no biases: the GPT-2-vocabulary case, padded to 50304.
const fs::path kTinyModel = kSource / "tests/data/tiny-nanogpt";
// Torch's import alone takes seconds on a shared core.
constexpr auto kTimeout = 120s;

// Runs `args` (args[0] looked up in PATH) to completion, within kTimeout;
// stdout and stderr go through files in `dir`.
daemon_test::ProcessResult run(std::vector<std::string> args, const fs::path& dir) {
  return daemon_test::run_process(std::move(args), dir, daemon_test::environment_with({}),
                                  "/dev/null", kTimeout);
}

bool one_line(const std::string& text) {
  return !text.empty() && text.find('\n') == text.size() - 1;
}

class ConvertNanogpt : public ::testing::Test {
 protected:
  void SetUp() override {
    if (run({"python3", "--version"}, dir()).exit_code != 0)
      GTEST_SKIP() << "python3 is not installed; the converter is not exercised";
  }
  const fs::path& dir() const { return scratch_.path(); }

  // make_nanogpt_ckpt.py MODEL_DIR OUT [extra...]; OUT is under the scratch dir.
  fs::path make_checkpoint(const fs::path& model, const std::string& out,
                           std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"python3", kMaker, model, dir() / out};
    args.insert(args.end(), extra.begin(), extra.end());
    const daemon_test::ProcessResult r = run(args, dir());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return dir() / out;
  }
  daemon_test::ProcessResult convert(const fs::path& checkpoint, const fs::path& out,
                                     std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"python3", kConverter, checkpoint, out};
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args, dir());
  }
  // kvtierd's one-shot mode, greedy: the text it prints.
  daemon_test::ProcessResult generate(const fs::path& model, const std::string& prompt) {
    return run({KVTIER_DAEMON_PATH, "--model", model, "--prompt", prompt, "--temperature", "0",
                "--max-tokens", "40", "--seed", "1"},
               dir());
  }

  test_util::TempDir scratch_;
};

// Every tensor of `expected`, widened to fp32 as the engine widens it, equals
// the F32 tensor of the same name in `got`, bit for bit; `got` has no others.
void expect_same_f32_tensors(const fs::path& expected, const fs::path& got) {
  auto want = SafetensorsFile::open(expected);
  ASSERT_TRUE(want.has_value()) << want.error();
  auto have = SafetensorsFile::open(got);
  ASSERT_TRUE(have.has_value()) << have.error();
  EXPECT_EQ(have->names(), want->names());
  for (const std::string& name : want->names()) {
    SCOPED_TRACE(name);
    const SafetensorsTensor* w = want->find(name);
    const SafetensorsTensor* h = have->find(name);
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(h->dtype, "F32");
    ASSERT_EQ(h->shape, w->shape);
    std::vector<float> widened(w->elements());
    safetensors_to_f32(*w, widened.data());
    ASSERT_EQ(h->bytes, widened.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(h->data, widened.data(), h->bytes), 0) << "values differ";
  }
}

TEST_F(ConvertNanogpt, CharCheckpointGivesTheBundledModelBitForBit) {
  // torch.compile's "_orig_mod." keys, a tied lm_head, views at offsets and a
  // transposed view, mask buffers and optimizer tensors: see the maker.
  const fs::path ckpt = make_checkpoint(kCharModel, "out-fortunes-char");
  const fs::path out = dir() / "converted";
  // The folder, as nanoGPT's out_dir: ckpt.pt and meta.pkl are found in it.
  const daemon_test::ProcessResult r = convert(ckpt, out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(one_line(r.err)) << r.err;
  EXPECT_TRUE(test_util::contains(r.err, "characters from")) << r.err;
  EXPECT_EQ(r.out, "");

  expect_same_f32_tensors(kCharModel / "model.safetensors", out / "model.safetensors");
  const auto vocab = nlohmann::json::parse(test_util::read_file(out / "vocab.json"));
  EXPECT_EQ(vocab, nlohmann::json::parse(test_util::read_file(kCharModel / "vocab.json")));
  auto config = ModelConfig::load(out / "config.json");
  ASSERT_TRUE(config.has_value()) << config.error();
  auto bundled = ModelConfig::load(kCharModel / "config.json");
  ASSERT_TRUE(bundled.has_value()) << bundled.error();
  EXPECT_EQ(config->n_layer, bundled->n_layer);
  EXPECT_EQ(config->n_head, bundled->n_head);
  EXPECT_EQ(config->n_embd, bundled->n_embd);
  EXPECT_EQ(config->vocab_size, bundled->vocab_size);
  EXPECT_EQ(config->block_size, bundled->block_size);
  EXPECT_EQ(config->bias, bundled->bias);
  EXPECT_EQ(config->gelu, Gelu::kErf);  // nanoGPT's nn.GELU()
  EXPECT_EQ(config->weight_layout, kernels::WeightLayout::kOutIn);
  EXPECT_EQ(config->tokenizer.type, TokenizerSpec::Type::kChar);

  // The real daemon serves it, and greedy decoding agrees token for token.
  const daemon_test::ProcessResult mine = generate(out, "Q: Why");
  ASSERT_EQ(mine.exit_code, 0) << mine.err;
  const daemon_test::ProcessResult reference = generate(kCharModel, "Q: Why");
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  EXPECT_GT(mine.out.size(), std::string("Q: Why\n").size());
  EXPECT_EQ(mine.out, reference.out);
}

TEST_F(ConvertNanogpt, HalfPrecisionWeightsWidenExactly) {
  for (const char* dtype : {"f16", "bf16"}) {
    SCOPED_TRACE(dtype);
    const std::string name = std::string("ckpt-") + dtype;
    // The maker also writes the weights as it stored them (F16 / BF16).
    const fs::path ckpt = make_checkpoint(
        kCharModel, name, {"--dtype", dtype, "--expected", dir() / (name + ".safetensors")});
    const fs::path out = dir() / (name + "-out");
    const daemon_test::ProcessResult r = convert(ckpt / "ckpt.pt", out);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_same_f32_tensors(dir() / (name + ".safetensors"), out / "model.safetensors");
    const daemon_test::ProcessResult text = generate(out, "Q: Why");
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_TRUE(text.out.starts_with("Q: Why")) << text.out;
    EXPECT_GT(text.out.size(), std::string("Q: Why\n").size());
  }
}

TEST_F(ConvertNanogpt, WithoutMetaPklTheModelGetsGpt2Bpe) {
  // nanoGPT's GPT-2-vocabulary models (openwebtext, or fine-tuned from gpt2)
  // have no meta.pkl and a vocabulary padded to 50304; bias=False here. The
  // padded rows are zeros, and greedy ties keep the lower id, so no id past
  // the tokenizer's 50257 is generated.
  const fs::path ckpt =
      make_checkpoint(kTinyModel, "out-owt", {"--no-meta", "--vocab-size", "50304"});
  const fs::path out = dir() / "owt";
  const daemon_test::ProcessResult r = convert(ckpt, out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(test_util::contains(r.err, "GPT-2 BPE")) << r.err;
  auto config = ModelConfig::load(out / "config.json");
  ASSERT_TRUE(config.has_value()) << config.error();
  EXPECT_EQ(config->vocab_size, 50304);
  EXPECT_FALSE(config->bias);
  EXPECT_EQ(config->tokenizer.type, TokenizerSpec::Type::kBpe);
  for (const char* file : {"encoder.json", "vocab.bpe"})
    EXPECT_EQ(test_util::read_file(out / file),
              test_util::read_file(kSource / "models/gpt2-bpe" / file))
        << file;
  auto weights = SafetensorsFile::open(out / "model.safetensors");
  ASSERT_TRUE(weights.has_value()) << weights.error();
  EXPECT_EQ(weights->find("transformer.wte.weight")->shape,
            (std::vector<std::uint64_t>{50304, 32}));
  EXPECT_EQ(weights->find("transformer.h.0.ln_1.bias"), nullptr);
  const daemon_test::ProcessResult text = generate(out, "Hello, world");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(text.out.starts_with("Hello, world")) << text.out;
  EXPECT_TRUE(test_util::contains(text.err, "40 generated")) << text.err;
}

TEST_F(ConvertNanogpt, BadInputIsOneLineAndExitStatus2) {
  struct Case {
    std::vector<std::string> maker_args;  // the checkpoint, broken this way
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--drop-key", "model_args"}, "missing key 'model_args'"},
      {{"--drop", "transformer.h.1.mlp.c_fc.weight"},
       "missing tensors 'transformer.h.1.mlp.c_fc.weight'"},
      {{"--model-arg", "vocab_size=97"},
       "tensor 'transformer.wte.weight' has shape [96, 128], expected [97, 128]"},
      {{"--model-arg", "n_head=3"}, "n_embd 128 is not divisible by n_head 3"},
      {{"--f64", "transformer.h.0.attn.c_attn.weight"},
       "'transformer.h.0.attn.c_attn.weight' has dtype torch.DoubleStorage; only float32, "
       "float16 and bfloat16"},
      {{"--meta-chars", "90"}, "90 characters, but the checkpoint's vocab_size is 96"},
      {{"--untie"}, "lm_head.weight differs from transformer.wte.weight"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].message);
    const fs::path ckpt =
        make_checkpoint(kCharModel, "bad" + std::to_string(i), cases[i].maker_args);
    const fs::path out = dir() / ("bad-out" + std::to_string(i));
    const daemon_test::ProcessResult r = convert(ckpt, out);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(one_line(r.err)) << r.err;
    EXPECT_TRUE(r.err.starts_with("convert_nanogpt: error: ")) << r.err;
    EXPECT_TRUE(test_util::contains(r.err, cases[i].message));
    EXPECT_FALSE(fs::exists(out)) << "a refused conversion left " << out;
  }

  // Files that are no checkpoint at all, and usage errors.
  const fs::path good = make_checkpoint(kCharModel, "good");
  const fs::path text = scratch_.write("notes.pt", "not a checkpoint\n");
  const fs::path nonempty = dir() / "nonempty";
  fs::create_directories(nonempty);
  scratch_.write("nonempty/keep.txt", "mine\n");
  const std::vector<std::pair<std::vector<std::string>, std::string>> misuse = {
      {{text, dir() / "o1"}, "not a zip archive"},
      {{dir() / "missing.pt", dir() / "o2"}, "no such file"},
      {{good, nonempty}, "not empty (--force writes into it anyway)"},
      {{good, dir() / "o3", "--meta", dir() / "none.pkl"}, "No such file or directory"},
      {{good / "ckpt.pt", dir() / "o4", "--meta", text}, "cannot unpickle"},
      {{good}, "required: out"},
  };
  for (const auto& [args, message] : misuse) {
    SCOPED_TRACE(message);
    std::vector<std::string> argv = {"python3", kConverter};
    argv.insert(argv.end(), args.begin(), args.end());
    const daemon_test::ProcessResult r = run(argv, dir());
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(one_line(r.err)) << r.err;
    EXPECT_TRUE(test_util::contains(r.err, message));
  }
  EXPECT_EQ(test_util::read_file(nonempty / "keep.txt"), "mine\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(nonempty), fs::directory_iterator()), 1);
}

TEST_F(ConvertNanogpt, HostilePicklesAreRefusedWithoutRunningThem) {
  // torch.load(weights_only=False) would run these; the converter must not.
  for (const char* where : {"--evil-data", "--evil-meta"}) {
    SCOPED_TRACE(where);
    const fs::path marker = dir() / (std::string(where + 2) + "-ran");
    const fs::path ckpt =
        make_checkpoint(kCharModel, where + 2, {where, "touch " + marker.string()});
    const daemon_test::ProcessResult r = convert(ckpt, dir() / (std::string(where + 2) + "-out"));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(one_line(r.err)) << r.err;
    EXPECT_TRUE(test_util::contains(r.err, "refers to posix.system")) << r.err;
    EXPECT_TRUE(test_util::contains(r.err, "nothing")) << r.err;
    EXPECT_FALSE(fs::exists(marker)) << "the pickle's command ran";
  }
}

// Both directions against the real PyTorch, where it is installed: torch.load
// reads what the maker writes (the same tensors, tied storage, views), and
// the converter reads what torch.save writes (fp32, fp16, bf16), giving the
// fp32 values torch itself widens to.
TEST_F(ConvertNanogpt, AgreesWithRealTorch) {
  const std::vector<std::string> dtypes = {"f32", "f16", "bf16"};
  for (const std::string& dtype : dtypes)
    make_checkpoint(kCharModel, "made-" + dtype, {"--dtype", dtype});
  // One process checks what the maker wrote and writes torch's own (see the
  // helper); it exits 77 where torch cannot be imported.
  daemon_test::ProcessResult torch_run;
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    torch_run = run({python, kTorchHelper, kCharModel, dir()}, dir());
    if (torch_run.exit_code != 77) break;
  }
  if (torch_run.exit_code == 77)
    GTEST_SKIP() << "no python3 here imports torch (Debian: python3-torch); the checks "
                    "against the real torch.save and torch.load are skipped";
  ASSERT_EQ(torch_run.exit_code, 0) << torch_run.err;
  EXPECT_EQ(torch_run.out, "ok\n");

  for (const std::string& dtype : dtypes) {
    SCOPED_TRACE(dtype);
    const fs::path out = dir() / ("saved-out-" + dtype);
    const daemon_test::ProcessResult r = convert(dir() / ("saved-" + dtype), out);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_same_f32_tensors(dir() / ("saved-" + dtype) / "expected.safetensors",
                            out / "model.safetensors");
    if (dtype == "f32") {
      expect_same_f32_tensors(kCharModel / "model.safetensors", out / "model.safetensors");
      const daemon_test::ProcessResult mine = generate(out, "Q: Why");
      ASSERT_EQ(mine.exit_code, 0) << mine.err;
      EXPECT_EQ(mine.out, generate(kCharModel, "Q: Why").out);
    }
  }
}

}  // namespace
}  // namespace kvtier
