// Replays nasty inputs through the fuzz target's entry point
// (fuzz/protocol_fuzz_one.h) with the normal build, so CI exercises the
// parser's properties without clang: the seeds and finds in fuzz/corpus, the
// hand-written cases below, and what the fuzzer's structure-aware generator
// (fuzz/protocol_fuzz_gen.h) writes from fixed seeds. A broken property
// aborts the test binary.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "fuzz/protocol_fuzz_gen.h"
#include "fuzz/protocol_fuzz_one.h"

namespace kvtier::wire {
namespace {

void replay(const std::string& input) {
  protocol_fuzz_one(reinterpret_cast<const std::uint8_t*>(input.data()), input.size());
}

TEST(ProtocolFuzzCorpusTest, NastyInputsKeepEveryProperty) {
  const std::vector<std::string> inputs = {
      "",
      "\n\n\n",
      std::string("\0\0\0\n", 4),
      "{",
      "}",
      "[]\n[{}]\n",
      "null\ntrue\n0\n\"x\"\n",
      R"({"jsonrpc":"2.0","id":1,"method":"generate","params":{"prompt":"a","max_tokens":-1}})",
      R"({"jsonrpc":"2.0","id":1,"method":"generate","params":{"tokens":[1e400]}})",
      R"({"jsonrpc":"2.0","id":1,"method":"generate","params":{"tokens":[-9223372036854775808]}})",
      R"({"jsonrpc":"2.0","id":1,"method":"generate","params":{"prompt":"a","n":18446744073709551615}})",
      R"({"jsonrpc":"2.0","id":1,"method":"generate","params":{"prompt":"a","seed":-0}})",
      R"({"jsonrpc":"2.0","id":1,"method":"generate","params":{"prompt":"a","temperature":1e39}})",
      R"({"jsonrpc":"2.0","id":1,"method":"generate","params":{"prompt":"\ud800"}})",
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\",\"params\":{}}",
      "{\"jsonrpc\":\"2.0\",\"id\":\"\xc3\",\"method\":\"x\"}",
      R"({"jsonrpc":"2.0","id":1.5,"method":"x"})",
      R"({"jsonrpc":"2.0","id":[1],"method":"x"})",
      R"({"jsonrpc":"2.0","id":1,"id":2,"method":"x"})",
      R"({"jsonrpc":"2.0","id":1,"method":"cancel","params":{"id":18446744073709551615}})",
      R"({"jsonrpc":"2.0","id":1,"method":"cancel","params":{"id":-1}})",
      R"({"jsonrpc":"2.0","id":1,"method":"stats","params":[1,2,3]})",
      R"({"jsonrpc":"2.0","id":1,"method":"config.set","params":{"token_budget":1e999}})",
      std::string(5000, '[') + "\n",
      std::string(2000, '[') + std::string(2000, ']'),
      R"({"jsonrpc":"2.0","id":1,"method":"x","params":)" + std::string(1900, '[') +
          std::string(1900, ']') + "}",
      std::string(100000, '{'),
      // Depth: the request object is level 1, params level 2.
      R"({"jsonrpc":"2.0","id":1,"method":"x","params":)" + std::string(63, '[') +
          std::string(63, ']') + "}",
      R"({"jsonrpc":"2.0","id":1,"method":"x","params":)" + std::string(64, '[') +
          std::string(64, ']') + "}",
      R"({"jsonrpc":"2.0","id":1,"method":"generate","params":{"prompt":")" +
          std::string(100000, '[') + R"("}})",
      R"({"jsonrpc":"2.0","id":1,"method":"generate","params":{"prompt":"\"[[[[[[[[["}})",
      R"({"jsonrpc":"2.0","id":1,"method":"generate","params":{"prompt":"a","temperature":-1e-300}})",
      R"({"jsonrpc":"2.0","id":1,"method":"generate","params":{"prompt":"a","top_p":1e-300}})",
      R"({"jsonrpc":"2.0","id":1,"method":"generate","params":{"prompt":"a","top_p":1.0000001}})",
      R"({"jsonrpc":"2.0","id":1,"method":"help","params":[]})",
      std::string(kProtocolFuzzMaxLineBytes + 1, 'x') + "\n" +
          R"({"jsonrpc":"2.0","method":"health"})" + "\r\n",
  };
  for (const std::string& input : inputs) replay(input);
}

TEST(ProtocolFuzzCorpusTest, FramerLimitIsTheDaemonsDefault) {
  EXPECT_EQ(kProtocolFuzzMaxLineBytes, daemon::DaemonConfig{}.max_line_bytes);
}

// The fuzzer's generator from fixed seeds, so CI runs what it writes (deep
// requests above all) without clang. Small inputs for many seeds, a few at
// libFuzzer's full length, and each deepened.
TEST(ProtocolFuzzCorpusTest, GeneratedRequestsKeepEveryProperty) {
  for (std::uint64_t seed = 0; seed < 400; ++seed) {
    const std::size_t max_bytes = seed < 8 ? kProtocolFuzzMaxLineBytes : 16384;
    ProtocolFuzzGen gen(seed, max_bytes);
    const std::string input = gen.input();
    ASSERT_LE(input.size(), max_bytes);
    replay(input);
    const std::string deeper = gen.deepen(input);
    ASSERT_LE(deeper.size(), max_bytes);
    replay(deeper);
  }
}

TEST(ProtocolFuzzCorpusTest, EveryCorpusFileKeepsEveryProperty) {
  const auto dir = std::filesystem::path(KVTIER_SOURCE_DIR) / "fuzz/corpus";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    replay(bytes.str());
    ++files;
  }
  EXPECT_GT(files, 0) << "no corpus in " << dir;
}

}  // namespace
}  // namespace kvtier::wire
