// Replays nasty inputs through the fuzz target's entry point
// (fuzz/protocol_fuzz_one.h) with the normal build, so CI exercises the
// parser's properties without clang: the seeds and finds in fuzz/corpus, and
// the hand-written cases below. A broken property aborts the test binary.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz/protocol_fuzz_one.h"

namespace kvtier::daemon {
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
      std::string(5000, 'x') + "\n" + R"({"jsonrpc":"2.0","method":"health"})" + "\r\n",
  };
  for (const std::string& input : inputs) replay(input);
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
}  // namespace kvtier::daemon
