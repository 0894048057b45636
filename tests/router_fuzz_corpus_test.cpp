// Replays inputs through the router fuzz target's harness
// (fuzz/router_fuzz_one.h) with the normal build, so CI holds kvtier-router's
// front doors to the fuzzer's properties without clang: hand-written
// inputs (each client-leaves shape among them), the seeds and finds in
// fuzz/router-corpus, and what the fuzzer's generator
// (fuzz/router_fuzz_gen.h) writes from fixed seeds. A broken property
// aborts the test binary.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz/router_fuzz_gen.h"
#include "fuzz/router_fuzz_one.h"

namespace kvtier::router {
namespace {

const std::filesystem::path kModelDir =
    std::filesystem::path(KVTIER_SOURCE_DIR) / "models/fortunes-char";

std::string http(const std::string& method, const std::string& path, const std::string& body,
                 const std::string& headers = "") {
  return method + " " + path + " HTTP/1.1\r\nHost: x\r\n" + headers +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

TEST(RouterFuzzCorpusTest, NastyInputsKeepEveryProperty) {
  RouterFuzz harness(kModelDir);
  const std::string rpc = R"({"jsonrpc":"2.0","id":1,"method":"generate","params":)";
  const std::vector<std::string> inputs = {
      "",
      "\n\n",
      "{",
      rpc + R"({"prompt":"Q:","max_tokens":4,"stream":true}})" + "\n",
      rpc + R"({"prompt":"Q:","max_tokens":3}})" + "\n",   // refused by one stand-in
      rpc + R"({"prompt":"Q:","max_tokens":15}})" + "\n",  // refused by both
      rpc + R"({"prompt":"Q:","max_tokens":4,"stream":true}})" + "\n" +
          R"({"jsonrpc":"2.0","id":2,"method":"cancel","params":{"id":1}})" + "\n",
      R"({"jsonrpc":"2.0","id":1,"method":"shutdown"})"
      "\n",
      R"({"jsonrpc":"2.0","id":1,"method":"fleet.route","params":{"tokens":[-1,96,1e3]}})",
      R"({"jsonrpc":"2.0","id":1,"method":"stats"})"
      "\n",
      std::string(1 << 20 | 1, 'x') + "\n",
      http("POST", "/v1/completions", R"({"prompt":"Q:","max_tokens":4,"stream":true})"),
      http("POST", "/v1/completions", R"({"prompt":"Q:","max_tokens":3})"),
      http("POST", "/v1/completions", R"({"prompt":"Q:","max_tokens":15,"stream":true})"),
      http("POST", "/v1/chat/completions",
           R"({"messages":[{"role":"user","content":"Why?"}],"max_tokens":2})"),
      http("POST", "/v1/completions", R"({"prompt":"Q:","max_tokens":4,"stream":true})") +
          http("GET", "/health", "") + http("GET", "/metrics", "") + http("GET", "/v1/models", ""),
      http("HEAD", "/health", ""),
      http("DELETE", "/v1/completions", ""),
      http("POST", "/v1/completions", "{", "Expect: 100-continue\r\n"),
      "POST /v1/completions HTTP/1.1\r\nContent-Length: 1000\r\n\r\n{\"prompt\":",
      "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"pro\r\n",
      "GET / HTTP/1.1\r\nX: " + std::string(20000, 'h') + "\r\n\r\n",
      "G\r\n\r\n",
      // Clients that leave while their requests are on the daemons.
      rpc + R"({"prompt":"Q:","max_tokens":4,"stream":true}})" + "\n" + RouterFuzz::kLeaveEarly,
      rpc + R"({"prompt":"Q:","max_tokens":3}})" + "\n" + RouterFuzz::kLeaveEarly,
      http("POST", "/v1/completions", R"({"prompt":"Q:","max_tokens":4,"stream":true})") +
          RouterFuzz::kLeaveEarly,
      http("POST", "/v1/completions", R"({"prompt":"Q:","max_tokens":3})") +
          RouterFuzz::kLeaveEarly,
  };
  for (const std::string& input : inputs) harness.one(input);
}

// The fuzzer's generator from fixed seeds, so CI runs the shapes it writes.
TEST(RouterFuzzCorpusTest, GeneratedClientsKeepEveryProperty) {
  RouterFuzz harness(kModelDir);
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const std::string input = RouterFuzzGen(seed, 65536).input();
    ASSERT_LE(input.size(), 65536u);
    harness.one(input);
  }
}

TEST(RouterFuzzCorpusTest, EveryCorpusFileKeepsEveryProperty) {
  RouterFuzz harness(kModelDir);
  const auto dir = std::filesystem::path(KVTIER_SOURCE_DIR) / "fuzz/router-corpus";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    harness.one(bytes.str());
    ++files;
  }
  EXPECT_GT(files, 0) << "no corpus in " << dir;
}

}  // namespace
}  // namespace kvtier::router
