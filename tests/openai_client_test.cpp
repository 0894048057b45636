// OpenAI's official client library (the openai npm package, run with the
// machine's Node.js) against a real kvtierd serving HTTP on loopback TCP
// with an API key: what it gets is compared with the daemon's JSON-RPC
// answers to the same requests, and its errors must be the library's own
// exception classes. tests/openai_client/client.mjs makes the calls;
// scripts/install-deps.sh installs the package (npm ci) where npm can
// reach its registry; elsewhere the test skips and says so.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "daemon_test_util.h"

namespace kvtier {
namespace {

using namespace daemon_test;
using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kClientDir = fs::path(KVTIER_SOURCE_DIR) / "tests/openai_client";
const std::string kPrompt = "Q: What is the difference between a cat and a lion? A:";

json rpc(Daemon& d, json params, std::vector<std::string>* pieces = nullptr) {
  auto c = d.connect();
  std::vector<json> notes;
  params["stream"] = pieces != nullptr;
  auto r = c->call(request(1, "generate", params), &notes);
  EXPECT_TRUE(r && r->contains("result"));
  if (pieces)
    for (const json& n : notes)
      if (!n["params"]["text"].get<std::string>().empty()) pieces->push_back(n["params"]["text"]);
  return r && r->contains("result") ? (*r)["result"] : json::object();
}

TEST(OpenAiClientTest, TheOfficialLibraryGetsTheEnginesAnswersAndItsOwnErrors) {
  if (!test_util::on_path("node"))
    GTEST_SKIP() << "Node.js is not installed: the openai library cannot run";
  if (!fs::exists(kClientDir / "node_modules/openai/package.json"))
    GTEST_SKIP() << "the openai npm package is not installed in " << kClientDir
                 << " (scripts/install-deps.sh runs npm ci there; npm could not reach its "
                    "registry)";
  const int port = test_util::free_tcp_port();
  test_util::TempDir dir;
  const fs::path key = dir.path() / "api-key";
  std::ofstream(key) << "kvtier-test-key-0123456789\n";
  fs::permissions(key, fs::perms::owner_read | fs::perms::owner_write);
  Daemon d(
      {"--http-listen", "127.0.0.1:" + std::to_string(port), "--http-api-key-file", key.string()});
  ASSERT_TRUE(d.wait_ready()) << d.log();

  const std::string cmd = "node '" + (kClientDir / "client.mjs").string() +
                          "' http://127.0.0.1:" + std::to_string(port) +
                          "/v1 kvtier-test-key-0123456789 fortunes-char 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string output;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) output.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << output;
  const json got = json::parse(output, nullptr, false);
  ASSERT_TRUE(got.is_object()) << output;
  ASSERT_FALSE(got.contains("unexpected")) << got["unexpected"];

  EXPECT_EQ(got["models"], json::array({"fortunes-char"}));
  const json greedy = rpc(d, {{"prompt", kPrompt}, {"max_tokens", 20}, {"temperature", 0}});
  EXPECT_EQ(got["completion"]["text"], greedy["text"]);
  EXPECT_EQ(got["completion"]["finish_reason"], "length");
  EXPECT_EQ(got["completion"]["usage"]["completion_tokens"], 20);
  std::vector<std::string> pieces;
  rpc(d, {{"prompt", kPrompt}, {"max_tokens", 16}, {"temperature", 0.8}, {"seed", 3}}, &pieces);
  EXPECT_EQ(got["streamed"]["pieces"].get<std::vector<std::string>>(), pieces);
  EXPECT_EQ(got["streamed"]["usage"]["completion_tokens"], 16);
  const json chat = rpc(d, {{"prompt", "Q: What is love?\nA:"},
                            {"max_tokens", 12},
                            {"temperature", 0},
                            {"stop", {"\nQ:"}}});
  EXPECT_EQ(got["chat"]["role"], "assistant");
  EXPECT_EQ(got["chat"]["content"], chat["text"]);
  EXPECT_EQ(got["chat_streamed"], chat["text"]);
  EXPECT_EQ(got["n"], json::array({0, 1, 2}));
  EXPECT_EQ(got["bad_parameter"], "BadRequestError");
  EXPECT_EQ(got["missing_model"], "NotFoundError");
  EXPECT_EQ(got["wrong_key"], "AuthenticationError");
}

}  // namespace
}  // namespace kvtier
