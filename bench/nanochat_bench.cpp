// The nanochat family's forward on the CPU at nanochat's d20 shapes (20
// layers, 1280 wide, 10 heads, vocabulary 65,536, windows SSSL, generation
// 5; random weights written to a temp folder as the converter writes one),
// against an eager PyTorch twin of the same architecture on the same folder
// (scripts/nanochat_twin.py, Debian's torch, the same 2 threads) and the
// GPT-2 path at the same width, all in one run:
//   prefill 512 / 1024   TTFT and GFLOP/s (the GPT-2 path's GFLOP/s beside)
//   decode batch 1       ms a token after a 512-token prompt; weight bytes
//                        read per token x tokens/s / this machine's read
//                        bandwidth (the memory-read limit)
//   8 samples            tok/s of 8 rows decoding behind one shared prompt
//   peak RSS             this process's, loaded and run, against the twin's
// Prints figures and ratios; asserts nothing. About 5 minutes on 2 cores
// (the twin most of it), and 5.6 GB of disk while it runs.
//
//   build/bench/nanochat_bench [--dir FOLDER] [--no-twin]
// --dir uses (or, when empty, fills) a folder and keeps it.
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/machine_peaks.h"
#include "bench/prefill_timing.h"
#include "bench/random_nanochat.h"
#include "engine/model/gpt2/gpt2_model.h"
#include "engine/model/nanochat/nanochat_model.h"

namespace {

namespace fs = std::filesystem;
using kvtier::Model;
using kvtier::SequenceKv;
using kvtier::bench::prefill_seconds;
using kvtier::bench::random_tokens;
using kvtier::bench::seconds_since;

constexpr int kThreads = 2;
constexpr int kPage = 16;
constexpr int kDecodeContext = 512;
constexpr int kDecodeSteps = 16;
constexpr int kSamples = 8;

// FLOPs of a prefill of T tokens of a nanochat model: the linear layers, the
// attention each layer's window allows, one row of the head.
double nanochat_prefill_flops(const kvtier::NanochatConfig& c, int T) {
  const double C = c.n_embd, KV = c.kv_dim(), D = c.head_dim();
  double flops = 2.0 * T * c.n_layer * (2 * C * C + 2 * C * KV + 8 * C * C);
  for (int l = 0; l < c.n_layer; ++l) {
    const int w = c.window(l);
    double keys = 0;  // keys the T queries see, together
    for (int q = 0; q < T; ++q) keys += w < 0 ? q + 1 : std::min(q, w) + 1;
    flops += 2.0 * 2.0 * D * c.n_head * keys;
  }
  return flops + 2.0 * C * c.vocab_size;
}

// Seconds a decode step of B rows behind one shared prompt of `context`
// tokens takes (the mean of kDecodeSteps steps).
double decode_step_seconds(Model& model, kvtier::tiers::BlockPool& pool, int B, int context) {
  const auto prompt = random_tokens(context, model.config().vocab_size, 7);
  std::vector<SequenceKv> seqs;
  seqs.emplace_back(kPage);
  seqs[0].reserve(pool, context);
  const Model::Chunk first{&seqs[0], prompt, false};
  (void)model.forward(std::span(&first, 1), pool);
  for (int s = 1; s < B; ++s) seqs.push_back(seqs[0].fork(pool));
  for (auto& s : seqs) s.reserve(pool, context + kDecodeSteps + 1);
  std::vector<int> next(B, 1);
  std::vector<Model::Chunk> batch;
  for (int s = 0; s < B; ++s)
    batch.push_back({&seqs[s], std::span(&next[s], 1), false, nullptr, prompt.back()});
  (void)model.forward(batch, pool);  // untimed: the first step touches fresh pages
  for (auto& c : batch) c.previous_token = 1;
  const auto start = std::chrono::steady_clock::now();
  for (int step = 0; step < kDecodeSteps; ++step) (void)model.forward(batch, pool);
  const double seconds = seconds_since(start) / kDecodeSteps;
  for (auto& s : seqs) s.release(pool);
  return seconds;
}

// The resident set now (VmRSS), in bytes.
double rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  double kb = 0;
  while (f != nullptr && std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, "VmRSS: %lf kB", &kb) == 1) break;
  if (f != nullptr) std::fclose(f);
  return kb * 1024.0;
}

struct Figures {
  double ttft512 = 0, ttft1024 = 0, decode1_s = 0, samples_tok_s = 0, peak_rss = 0;
};

void row(const char* name, double ours, double twin, const char* unit, bool lower_is_better) {
  if (twin <= 0) {
    std::printf("  %-28s %10.3f %s\n", name, ours, unit);
    return;
  }
  std::printf("  %-28s %10.3f %10.3f %-6s %6.2fx\n", name, ours, twin, unit,
              lower_is_better ? twin / ours : ours / twin);
}

}  // namespace

int main(int argc, char** argv) {
  kvtier::bench::use_best_openblas_kernels(argv);
  omp_set_num_threads(kThreads);
  fs::path dir;
  bool keep = false, twin = true;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--dir" && i + 1 < argc) {
      dir = argv[++i];
      keep = true;
    } else if (arg == "--no-twin") {
      twin = false;
    } else {
      std::fprintf(stderr, "usage: %s [--dir FOLDER] [--no-twin]\n", argv[0]);
      return 2;
    }
  }
  if (dir.empty()) dir = fs::temp_directory_path() / ("nanochat_bench." + std::to_string(getpid()));
  fs::create_directories(dir);
  if (!fs::exists(dir / "model.safetensors")) {
    const auto start = std::chrono::steady_clock::now();
    if (auto ok = kvtier::bench::write_random_nanochat(dir, kvtier::bench::NanochatShape::d20(), 1);
        !ok) {
      std::fprintf(stderr, "%s\n", ok.error().c_str());
      return 1;
    }
    std::printf("wrote a d20-shaped random G5 model to %s in %.1f s\n", dir.c_str(),
                seconds_since(start));
  }

  Figures ours;
  double load_s = 0, rss_loaded = 0, peak_loaded = 0, peak_prefill = 0, gflops512 = 0,
         gflops1024 = 0, packed = 0;
  kvtier::NanochatConfig config;
  {
    const auto start = std::chrono::steady_clock::now();
    auto model = kvtier::NanochatModel::load(dir);
    if (!model) {
      std::fprintf(stderr, "%s\n", model.error().c_str());
      return 1;
    }
    load_s = seconds_since(start);
    rss_loaded = rss_bytes();
    peak_loaded = kvtier::bench::peak_rss_bytes();
    config = model->nanochat_config();
    const auto layout = model->kv_layout(kPage);
    const int blocks = (1024 + kPage) / kPage + kSamples * (kDecodeContext + 64) / kPage + 8;
    kvtier::tiers::BlockPool pool(layout.block_bytes(), blocks);
    (void)prefill_seconds(*model, pool, 64, kPage);  // warm-up: first touches of the buffers
    ours.ttft512 =
        kvtier::bench::best_seconds(2, [&] { (void)prefill_seconds(*model, pool, 512, kPage); });
    ours.ttft1024 = prefill_seconds(*model, pool, 1024, kPage);
    peak_prefill = kvtier::bench::peak_rss_bytes();
    gflops512 = nanochat_prefill_flops(config, 512) / ours.ttft512 / 1e9;
    gflops1024 = nanochat_prefill_flops(config, 1024) / ours.ttft1024 / 1e9;
    ours.decode1_s = decode_step_seconds(*model, pool, 1, kDecodeContext);
    ours.samples_tok_s = kSamples / decode_step_seconds(*model, pool, kSamples, kDecodeContext);
    ours.peak_rss = kvtier::bench::peak_rss_bytes();
    // A decode step reads every packed matrix and the head once.
    const double C = config.n_embd, KV = config.kv_dim();
    packed = 4.0 * (config.n_layer * (10 * C * C + 2 * C * KV) + C * config.vocab_size);
  }

  // The GPT-2 path at the same width and depth.
  double gpt2_gflops = 0;
  {
    kvtier::ModelConfig g = kvtier::ModelConfig::gpt2_124m();
    g.n_layer = config.n_layer;
    g.n_embd = config.n_embd;
    g.n_head = config.n_head;
    g.n_kv_head = config.n_head;
    g.vocab_size = config.vocab_size;
    kvtier::Gpt2Model gpt2(g, kvtier::ModelWeights::random(g, 1));
    kvtier::tiers::BlockPool pool(gpt2.kv_layout(kPage).block_bytes(), 1024 / kPage + 2);
    (void)prefill_seconds(gpt2, pool, 64, kPage);
    gpt2_gflops =
        kvtier::bench::gpt2_prefill_flops(g, 1024) / prefill_seconds(gpt2, pool, 1024, kPage) / 1e9;
  }
  const double read_bw = kvtier::bench::read_bytes_per_second(kThreads);

  Figures torch;
  if (twin) {
    const fs::path script =
        fs::path(__FILE__).parent_path().parent_path() / "scripts/nanochat_twin.py";
    const std::string command =
        "/usr/bin/python3 " + script.string() + " " + dir.string() + " --threads " +
        std::to_string(kThreads) + " --context " + std::to_string(kDecodeContext) + " --steps " +
        std::to_string(kDecodeSteps) + " --samples " + std::to_string(kSamples);
    std::printf("running the PyTorch twin: %s\n", command.c_str());
    std::fflush(stdout);
    std::string out;
    if (std::FILE* p = ::popen(command.c_str(), "r")) {
      char buf[4096];
      while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
      ::pclose(p);
    }
    const auto json = nlohmann::json::parse(
        out.substr(out.rfind('{') == std::string::npos ? 0 : out.rfind('{')), nullptr, false);
    if (json.is_discarded() || !json.is_object()) {
      std::printf("the twin gave no figures (needs Debian's python3-torch): %s\n", out.c_str());
    } else {
      torch.ttft512 = json.value("ttft512_s", 0.0);
      torch.ttft1024 = json.value("ttft1024_s", 0.0);
      torch.decode1_s = json.value("decode1_s", 0.0);
      torch.samples_tok_s = json.value("samples_tok_s", 0.0);
      torch.peak_rss = json.value("peak_rss_bytes", 0.0);
    }
  }

  std::printf("\nnanochat d20 shapes (G5, SSSL, %d threads), kvtier against the PyTorch twin:\n",
              kThreads);
  std::printf("  %-28s %10s %10s %-6s %7s\n", "", "kvtier", "torch", "", "ratio");
  row("TTFT 512 tokens", ours.ttft512, torch.ttft512, "s", true);
  row("TTFT 1024 tokens", ours.ttft1024, torch.ttft1024, "s", true);
  row("decode batch 1", ours.decode1_s * 1e3, torch.decode1_s * 1e3, "ms", true);
  row("decode 8 samples", ours.samples_tok_s, torch.samples_tok_s, "tok/s", false);
  row("peak RSS", ours.peak_rss / 1e9, torch.peak_rss / 1e9, "GB", true);
  std::printf(
      "\n  prefill GFLOP/s 512 / 1024:  %.1f / %.1f; the GPT-2 path at the same width: %.1f"
      " (nanochat / GPT-2 %.2f)\n",
      gflops512, gflops1024, gpt2_gflops, gflops1024 / gpt2_gflops);
  std::printf(
      "  decode batch 1 reads %.2f GB a token: %.1f GB/s, %.2f of this machine's %.1f GB/s\n",
      packed / 1e9, packed / ours.decode1_s / 1e9, packed / ours.decode1_s / read_bw,
      read_bw / 1e9);
  std::printf(
      "  loaded in %.1f s; resident after loading %.2f GB (packed matrices %.2f GB);"
      " peak after loading %.2f GB, after prefill %.2f GB\n",
      load_s, rss_loaded / 1e9, packed / 1e9, peak_loaded / 1e9, peak_prefill / 1e9);
  if (!keep) fs::remove_all(dir);
  return 0;
}
