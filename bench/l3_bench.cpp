// L3 store throughput against fio on the same file system: N blocks of GPT-2
// 124M's KV block (12 layers x 2 (K, V) x 768 x 16 positions x 4 bytes =
// 1179648 bytes) written and then read through L3Store at queue depth 64,
// then the same sizes with fio (io_uring, O_DIRECT, same block size and
// depth). Ours counts everything a caller waits for: index commits on write,
// XXH3 verification on read. Best of three passes each. Prints figures;
// asserts nothing.
//
//   build/bench/l3_bench [--dir=PATH] [--blocks=N] [--queue-depth=N]
//
// The directory defaults to $KVTIER_L3_BENCH_DIR, else l3_bench.tmp beside
// this program (in the build tree: /tmp may be tmpfs, which measures memory,
// not a disk). It is emptied first and removed at the end.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "tiers/l3_store.h"

namespace {

using kvtier::bench::seconds_since;
using kvtier::tiers::BlockKey;
using kvtier::tiers::L3Store;
using kvtier::tiers::StoreStatus;

constexpr std::size_t kBlockBytes = 12 * 2 * 768 * 16 * 4;
constexpr int kPasses = 3;

struct Args {
  std::filesystem::path dir;
  int blocks = 256;
  int queue_depth = 64;
};

Args parse(int argc, char** argv) {
  Args a;
  if (const char* env = std::getenv("KVTIER_L3_BENCH_DIR")) a.dir = env;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s.starts_with("--dir="))
      a.dir = s.substr(6);
    else if (s.starts_with("--blocks="))
      a.blocks = std::stoi(s.substr(9));
    else if (s.starts_with("--queue-depth="))
      a.queue_depth = std::stoi(s.substr(14));
    else
      std::fprintf(stderr, "l3_bench: ignoring unknown argument %s\n", s.c_str());
  }
  if (a.dir.empty())
    a.dir = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "l3_bench.tmp";
  return a;
}

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};

// Bytes per second fio reports for one job, or a negative number when it
// did not run or its output did not parse.
double run_fio(const std::string& file, std::size_t bytes, int queue_depth, const char* rw) {
  const std::string cmd =
      "fio --name=l3 --filename=" + file + " --size=" + std::to_string(bytes) +
      " --bs=" + std::to_string(kBlockBytes) + " --iodepth=" + std::to_string(queue_depth) +
      " --ioengine=io_uring --direct=1 --rw=" + rw + " --output-format=json 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  if (::pclose(p) != 0) return -1;
  // fio may print notes before the JSON object.
  const auto start = out.find('{');
  if (start == std::string::npos) return -1;
  const auto json = nlohmann::json::parse(out.substr(start), nullptr, false);
  if (json.is_discarded()) return -1;
  try {
    const char* side = std::string(rw) == "write" ? "write" : "read";
    return json.at("jobs").at(0).at(side).at("bw_bytes").get<double>();
  } catch (const nlohmann::json::exception&) {
    return -1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  std::error_code ec;
  std::filesystem::remove_all(args.dir, ec);
  std::filesystem::create_directories(args.dir, ec);
  const std::size_t total = static_cast<std::size_t>(args.blocks) * kBlockBytes;

  kvtier::tiers::L3Options o;
  o.path = (args.dir / "l3").string();
  o.block_bytes = kBlockBytes;
  o.capacity_bytes = static_cast<std::size_t>(args.blocks) * kBlockBytes;  // 4096-multiple
  o.format_tag = 1;
  o.queue_depth = args.queue_depth;
  auto opened = L3Store::open(o);
  if (!opened) {
    std::fprintf(stderr, "l3_bench: %s\n", opened.error().c_str());
    return 1;
  }
  L3Store& store = **opened;

  std::vector<std::unique_ptr<std::byte, FreeDeleter>> buffers;
  for (int i = 0; i < args.blocks; ++i) {
    buffers.emplace_back(static_cast<std::byte*>(std::aligned_alloc(4096, store.slot_bytes())));
    for (std::size_t j = 0; j < store.slot_bytes(); j += 8)
      std::memcpy(buffers.back().get() + j, &j, 8);  // not all zeros, not compressible to nothing
  }

  double best_write = 0, best_read = 0;
  long failures = 0;
  std::vector<BlockKey> keys;
  for (int pass = 0; pass < kPasses; ++pass) {
    // New keys each pass (a stored key is not written again), in freed slots.
    for (const BlockKey& k : keys) store.erase(k);
    keys.clear();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < args.blocks; ++i) {
      kvtier::tiers::BlockRecord r;
      r.key = {static_cast<std::uint64_t>(pass) + 1, static_cast<std::uint64_t>(i)};
      keys.push_back(r.key);
      store.write(r, buffers[i].get());
    }
    store.drain();
    best_write = std::max(best_write, static_cast<double>(total) / seconds_since(t0));
    for (const auto& c : store.poll()) failures += c.status != StoreStatus::kOk;

    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < args.blocks; ++i) store.read(keys[i], {}, buffers[i].get());
    store.drain();
    best_read = std::max(best_read, static_cast<double>(total) / seconds_since(t0));
    for (const auto& c : store.poll()) failures += c.status != StoreStatus::kOk;
  }
  const auto stats = store.stats();
  opened->reset();

  double fio_write = -1, fio_read = -1;
  const bool have_fio = std::system("command -v fio >/dev/null 2>&1") == 0;
  if (have_fio) {
    const std::string file = (args.dir / "fio.dat").string();
    for (int pass = 0; pass < kPasses; ++pass) {
      fio_write = std::max(fio_write, run_fio(file, total, args.queue_depth, "write"));
      fio_read = std::max(fio_read, run_fio(file, total, args.queue_depth, "read"));
    }
  }
  std::filesystem::remove_all(args.dir, ec);

  std::printf("== kvtier L3 store, %d blocks of %zu bytes (GPT-2 124M KV block), queue depth %d\n",
              args.blocks, kBlockBytes, args.queue_depth);
  std::printf("directory %s; best of %d passes; %ld operations not ok\n", args.dir.c_str(), kPasses,
              failures);
  std::printf("%-6s %12s %12s %8s\n", "", "ours MB/s", "fio MB/s", "ratio");
  const auto row = [&](const char* name, double ours, double fio) {
    if (fio > 0)
      std::printf("%-6s %12.1f %12.1f %8.2f  (target >= 0.8)\n", name, ours / 1e6, fio / 1e6,
                  ours / fio);
    else
      std::printf("%-6s %12.1f %12s %8s\n", name, ours / 1e6, have_fio ? "failed" : "-", "-");
  };
  row("write", best_write, fio_write);
  row("read", best_read, fio_read);
  if (!have_fio) std::printf("fio not installed\n");
  std::printf("latency per block: write mean %.0f us p99 %.0f us; read mean %.0f us p99 %.0f us\n",
              stats.mean_write_us, stats.p99_write_us, stats.mean_read_us, stats.p99_read_us);
  return 0;
}
