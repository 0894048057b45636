// The page (web/page_files.h) in a real browser: Debian's chromium, driven
// headless by puppeteer-core (tests/browser/page_check.mjs), against a real
// kvtierd serving the bundled chat model on loopback TCP with an API key,
// with L2 and L3, and against kvtier-router in front of two of them. The
// driver acts as a person would and reports what the page showed; this test
// checks it against the daemon. Screenshots stay in <build>/screenshots for
// a person to look at (docs/page.png is one). scripts/install-deps.sh
// installs chromium and the npm package; where either is missing the test
// skips and says so.
#include <filesystem>
#include <fstream>

#include "daemon_test_util.h"
#include "http_test_util.h"
#include "router_test_util.h"
#include "wire/http/listener.h"

namespace kvtier {
namespace {

using namespace daemon_test;
using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kDriverDir = fs::path(KVTIER_SOURCE_DIR) / "tests/browser";
const fs::path kChromium = "/usr/bin/chromium";
const fs::path kShots = fs::path(KVTIER_DAEMON_PATH).parent_path().parent_path() / "screenshots";
const fs::path kChatModel = fs::path(KVTIER_SOURCE_DIR) / "models/fortunes-chat";
const std::string kKey = "kvtier-page-test-key-0123456789";

// Why the browser cannot run here, or "".
std::string browser_missing() {
  if (!test_util::on_path("node")) return "Node.js is not installed";
  if (!fs::exists(kChromium)) return kChromium.string() + " is missing (Debian's chromium package)";
  if (!fs::exists(kDriverDir / "node_modules/puppeteer-core/package.json"))
    return "the puppeteer-core npm package is not installed in " + kDriverDir.string() +
           " (scripts/install-deps.sh runs npm ci there; npm could not reach its registry)";
  return "";
}

// What the driver saw, run with `cfg` (plus the browser and where the
// screenshots go); {} after a failed expectation.
json page_check(json cfg, const fs::path& dir) {
  cfg["chromium"] = kChromium.string();
  cfg["shots"] = kShots.string();
  fs::create_directories(kShots);
  const ProcessResult run =
      run_process({"node", (kDriverDir / "page_check.mjs").string(), cfg.dump()}, dir,
                  environment_with({}), "/dev/null", std::chrono::seconds(240));
  EXPECT_EQ(run.exit_code, 0) << run.err << run.out;
  const json seen = json::parse(run.out, nullptr, false);
  EXPECT_TRUE(seen.is_object()) << run.out << run.err;
  if (!seen.is_object()) return json::object();
  EXPECT_FALSE(seen.contains("unexpected")) << seen.dump(2);
  // Nothing fetched from elsewhere, nothing refused by our
  // Content-Security-Policy (chromium reports each refusal as an error).
  const std::string origin = cfg["url"];
  for (const json& r : seen["requests"]) EXPECT_EQ(r.get<std::string>().rfind(origin, 0), 0u) << r;
  EXPECT_TRUE(seen["console_errors"].empty()) << seen["console_errors"].dump(2);
  return seen;
}

TEST(PageTest, ChatsStreamsStopsAndShowsWhereEachPromptCameFrom) {
  if (const std::string why = browser_missing(); !why.empty()) GTEST_SKIP() << why;
  test_util::TempDir dir;
  const fs::path key = dir.path() / "api-key";
  std::ofstream(key) << kKey << "\n";
  fs::permissions(key, fs::perms::owner_read | fs::perms::owner_write);
  const int port = test_util::free_tcp_port();
  Daemon d({"--model", kChatModel.string(), "--http-listen", "127.0.0.1:" + std::to_string(port),
            "--http-api-key-file", key.string(), "--l2-bytes", "16M", "--l3-path",
            (dir.path() / "l3").string(), "--l3-bytes", "64M"});
  ASSERT_TRUE(d.wait_ready()) << d.log();

  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  const json cfg = {
      {"mode", "daemon"},
      {"url", url + "/"},
      {"key", kKey},
      {"ctl", kCtlPath.string()},
      {"socket", d.socket_path()},
      // Long enough for full KV blocks: the cache keeps whole blocks.
      {"first_message",
       "Tell me a fortune about a cat, a lion and a mouse who meet in a garden at night and "
       "talk about the moon."},
      {"second_message", "Tell me a very long story about the sea."},
      {"third_message", "And another one?"},
      {"fourth_message", "Thank you. One more?"}};
  const json seen = page_check(cfg, dir.path());
  ASSERT_FALSE(seen.empty() || seen.contains("unexpected")) << d.log();

  // The key: asked for, sent, kept for the tab only, never in the address.
  EXPECT_TRUE(seen["asked_for_key"].get<bool>());
  EXPECT_EQ(seen["model"].get<std::string>().rfind("fortunes-chat", 0), 0u) << seen["model"];
  EXPECT_EQ(seen["key_in_session_storage"], kKey);
  EXPECT_EQ(seen["local_storage_items"], 0);
  EXPECT_EQ(seen["page_url"].get<std::string>().find(kKey), std::string::npos);
  EXPECT_EQ(seen["shift_enter_value"], "one\ntwo");
  EXPECT_EQ(seen["messages_after_shift_enter"], 0);

  // Turn 1 streamed token by token; it is the daemon's greedy answer.
  const json& first = seen["first"];
  EXPECT_GT(first["pieces"].get<int>(), 1) << first;
  EXPECT_FALSE(first["text"].get<std::string>().empty());
  EXPECT_GT(first["prompt_tokens"].get<int>(), 16) << first;
  EXPECT_EQ(first["cached_tokens"], 0) << first;
  EXPECT_EQ(first["computed"], first["prompt_tokens"]);
  EXPECT_GT(first["ttft_ms"].get<double>(), 0);
  {
    auto c = d.connect();
    const json chat =
        call_result(*c, "generate",
                    {{"messages", {{{"role", "user"}, {"content", cfg["first_message"]}}}},
                     {"max_tokens", 40},
                     {"temperature", 0}});
    EXPECT_EQ(first["text"], chat["text"]);
  }

  // Turn 2 stopped mid-stream by Escape.
  EXPECT_TRUE(seen["stop_enabled_while_streaming"].get<bool>());
  EXPECT_TRUE(seen["stopped"]["stopped"].get<bool>()) << seen["stopped"];
  EXPECT_GE(seen["stopped"]["pieces"].get<int>(), 3);
  EXPECT_LT(seen["stopped"]["pieces"].get<int>(), 200);
  EXPECT_TRUE(seen["send_enabled_after_stop"].get<bool>());

  // Turn 3: the conversation so far from L1, shown in the answer's bar.
  const json& third = seen["third"];
  EXPECT_GT(third["cached_tokens"].get<int>(), 0) << third;
  EXPECT_EQ(third["l1"], third["cached_tokens"]) << third;
  EXPECT_EQ(third["cached_tokens"].get<int>() + third["computed"].get<int>(),
            third["prompt_tokens"].get<int>());
  EXPECT_EQ(third["bar_parts"], 2) << third;  // L1 and computed

  // The tiers panel followed the flush: L1 emptied into L2.
  EXPECT_GT(seen["l1_blocks_before_flush"].get<int>(), 0);
  EXPECT_EQ(seen["l1_blocks_after_flush"], 0);
  EXPECT_GT(seen["l2_blocks_after_flush"].get<int>(), seen["l2_blocks_before_flush"].get<int>());

  // Turn 4: the conversation back from L2.
  EXPECT_GT(seen["fourth"]["l2"].get<int>(), 0) << seen["fourth"];
  EXPECT_GT(seen["l2_hits_after_fourth"].get<int>(), 0);
  // The daemon's TTFT by source: turn 1 computed, turn 3 from L1, turn 4
  // from L2 (turn 2, stopped, from L1 or computed).
  EXPECT_EQ(seen["ttft_rows"], json::array({"l1", "l2", "computed"})) << seen["ttft_rows"];

  // /metrics counts every request with a first token under one source.
  const test_util::HttpAnswer metrics =
      test_util::curl(d.socket_path(), dir.path(), "GET", "/metrics");
  const auto by_source = [&](const std::string& source) {
    return test_util::metric(
        metrics.body,
        "kvtier_time_to_first_token_by_source_seconds_count{source=\"" + source + "\"}");
  };
  EXPECT_GE(by_source("l1"), 1);
  EXPECT_GE(by_source("l2"), 1);
  EXPECT_GE(by_source("computed"), 1);
  EXPECT_EQ(by_source("l1") + by_source("l2") + by_source("l3") + by_source("remote") +
                by_source("computed"),
            test_util::metric(metrics.body, "kvtier_time_to_first_token_seconds_count"));

  // Markup stays text, the user's and the model's.
  const json& markup = seen["markup"];
  EXPECT_EQ(markup["user_text"], markup["answer_text"]);
  EXPECT_EQ(markup["user_text"].get<std::string>().rfind("<img src=x", 0), 0u) << markup;
  EXPECT_EQ(markup["elements_in_log"], 0);
  EXPECT_FALSE(markup["script_ran"].get<bool>());

  // Bad input: the daemon's own message, and nothing lost.
  EXPECT_NE(seen["refused"]["error"].get<std::string>().find("max_tokens"), std::string::npos)
      << seen["refused"];
  EXPECT_EQ(seen["refused"]["pieces"], 0);
  EXPECT_EQ(seen["after_refusal"]["error"], "") << seen["after_refusal"];
  EXPECT_GT(seen["after_refusal"]["pieces"].get<int>(), 0) << seen["after_refusal"];
  EXPECT_GT(seen["after_refusal"]["prompt_tokens"].get<int>(), 0);

  EXPECT_LE(seen["narrow_overflow_px"].get<int>(), 0);
  for (const char* shot : {"page.png", "page-first-answer.png", "page-narrow.png"})
    EXPECT_TRUE(fs::exists(kShots / shot)) << shot;
}

// The router's page: its daemons, and a conversation that returns to the
// daemon holding it, shown in the answer and in the routes table.
TEST(PageTest, TheRoutersPageShowsTheFleetAndWhereEachRequestWent) {
  if (const std::string why = browser_missing(); !why.empty()) GTEST_SKIP() << why;
  Daemon d1({"--model", kChatModel.string()}), d2({"--model", kChatModel.string()});
  ASSERT_TRUE(d1.wait_ready()) << d1.log();
  ASSERT_TRUE(d2.wait_ready()) << d2.log();
  const int port = test_util::free_tcp_port();
  RouterProcess router(
      {d1.socket_path(), d2.socket_path()},
      {"--model", kChatModel.string(), "--http-listen", "127.0.0.1:" + std::to_string(port)});
  ASSERT_TRUE(router.wait_usable(0, true) && router.wait_usable(1, true)) << router.log();
  test_util::TempDir dir;
  const json seen = page_check(
      {{"mode", "fleet"},
       {"url", "http://127.0.0.1:" + std::to_string(port) + "/"},
       {"first_message",
        "Tell me a fortune about a cat, a lion and a mouse who meet in a garden at night and "
        "talk about the moon."},
       {"second_message", "And another one?"}},
      dir.path());
  ASSERT_FALSE(seen.empty() || seen.contains("unexpected")) << router.log();
  EXPECT_EQ(seen["side_title"], "Fleet");
  EXPECT_EQ(seen["daemons"].size(), 2u) << seen["daemons"];
  EXPECT_EQ(seen["first"]["cached_tokens"], 0) << seen["first"];
  EXPECT_GT(seen["second"]["cached_tokens"].get<int>(), 0) << seen["second"];
  // Newest first: the second turn went where the first left its prefix.
  ASSERT_EQ(seen["routes"].size(), 2u) << seen["routes"];
  EXPECT_EQ(seen["routes"][0]["reason"], "prefix") << seen["routes"];
  EXPECT_EQ(seen["routes"][0]["daemon"], seen["routes"][1]["daemon"]) << seen["routes"];
  const auto routed = seen["routed"].get<std::vector<int>>();
  ASSERT_EQ(routed.size(), 2u);
  EXPECT_EQ(routed[0] + routed[1], 2);
  EXPECT_TRUE(fs::exists(kShots / "page-fleet.png"));
}

// Without a key the page's files are served (they hold no data) and the
// API is not; the page is held to itself by its Content-Security-Policy.
TEST(PageTest, ThePagesFilesNeedNoKeyAndCarryTheirPolicy) {
  test_util::TempDir dir;
  const fs::path key = dir.path() / "api-key";
  std::ofstream(key) << kKey << "\n";
  fs::permissions(key, fs::perms::owner_read | fs::perms::owner_write);
  const int port = test_util::free_tcp_port();
  Daemon d({"--http-listen", "127.0.0.1:" + std::to_string(port), "--http-api-key-file",
            key.string(), "--log-level", "info"});
  ASSERT_TRUE(d.wait_ready()) << d.log();
  const fs::path headers = dir.path() / "headers.txt";
  const auto get = [&](const std::string& path, const std::string& extra = "") {
    return test_util::curl("", dir.path(), "GET", path, std::nullopt,
                           "-D '" + headers.string() + "' " + extra, port);
  };
  const auto header = [&](const std::string& name) {  // `name` lower-case
    std::ifstream in(headers);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      std::string lower = line;
      for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (lower.rfind(name + ": ", 0) == 0) return line.substr(name.size() + 2);
    }
    return std::string();
  };
  for (const auto& [path, type] :
       std::vector<std::pair<std::string, std::string>>{{"/", "text/html"},
                                                        {"/page.js", "text/javascript"},
                                                        {"/page.css", "text/css"},
                                                        {"/favicon.svg", "image/svg+xml"}}) {
    const test_util::HttpAnswer r = get(path);
    EXPECT_EQ(r.status, 200) << path << r.body;
    EXPECT_EQ(header("content-type").rfind(type, 0), 0u) << path;
    const std::string policy = header("content-security-policy");
    EXPECT_NE(policy.find("default-src 'none'"), std::string::npos) << policy;
    EXPECT_NE(policy.find("script-src 'self'"), std::string::npos) << policy;
    EXPECT_EQ(policy.find("unsafe"), std::string::npos) << policy;
    EXPECT_EQ(header("x-content-type-options"), "nosniff");
  }
  const test_util::HttpAnswer page = get("/");
  EXPECT_NE(page.body.find("<script src=\"/page.js\""), std::string::npos);
  EXPECT_EQ(page.body.find("<script>"), std::string::npos);  // nothing inline
  for (const char* path : {"/tiers", "/v1/models"}) EXPECT_EQ(get(path).status, 401) << path;
  const test_util::HttpAnswer tiers = get("/tiers", "-H 'Authorization: Bearer " + kKey + "'");
  ASSERT_EQ(tiers.status, 200) << tiers.body;
  // The same answer as the JSON-RPC method, field for field.
  auto c = d.connect();
  const json rpc = call_result(*c, "tiers");
  const json http = tiers.doc();
  for (const char* tier : {"l1", "l2", "l3", "remote"})
    EXPECT_EQ(http["tiers"][tier]["capacity_blocks"], rpc["tiers"][tier]["capacity_blocks"]);
  EXPECT_TRUE(http.contains("missed_blocks") && http.contains("costs"));
  // The start-up log says where the page is.
  EXPECT_NE(d.log().find("the page at http://127.0.0.1:" + std::to_string(port) + "/"),
            std::string::npos)
      << d.log();
}

TEST(PageTest, ListenersNameThePagesAddress) {
  namespace ip = boost::asio::ip;
  EXPECT_EQ(wire::http::describe({ip::tcp::endpoint(ip::make_address("::1"), 8000), ""}),
            "[::1]:8000; the page at http://[::1]:8000/");
  EXPECT_EQ(wire::http::describe({ip::tcp::endpoint(ip::address_v4::any(), 8000), "key"}),
            "0.0.0.0:8000 (API key required); the page at this machine's address, port 8000, "
            "path /");
}

}  // namespace
}  // namespace kvtier
