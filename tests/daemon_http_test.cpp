// Black-box tests of the HTTP API on kvtierd's own Unix socket: a real
// daemon, real curl (--unix-socket) for the endpoints, and raw bytes on the
// socket for what curl would never send. Answers are checked against the
// JSON-RPC answers to the same requests on the same daemon, token for
// token; bad HTTP gets an error or a closed connection, and JSON-RPC on the
// same socket keeps working throughout.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "daemon_test_util.h"
#include "http_test_util.h"

namespace kvtier {
namespace {

using namespace daemon_test;
using nlohmann::json;

using test_util::HttpAnswer;
using test_util::metric;

// `curl` against the daemon's socket (http_test_util.h).
HttpAnswer curl(const Daemon& d, const std::string& method, const std::string& path,
                const std::optional<json>& body = std::nullopt, const std::string& extra = "") {
  return test_util::curl(d.socket_path(), d.dir(), method, path, body, extra);
}

std::vector<json> events(const std::string& body) { return test_util::sse_events(body); }

// Whatever the daemon sends back to `bytes` on a raw connection, until it
// closes the connection or `wait` passes.
std::string raw_exchange(const Daemon& d, const std::string& bytes,
                         std::chrono::milliseconds wait = 10s) {
  Client c(d.socket_path());
  if (!c.valid() || !c.send_raw(bytes)) return "";
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < deadline) {
    auto line = c.read_raw(deadline - std::chrono::steady_clock::now());
    if (!line) break;  // closed, or the wait passed
    got += *line;
  }
  return got;
}

// The JSON-RPC answer to `params` on a new connection, with its streamed
// texts.
json rpc_generate(const Daemon& d, json params, std::vector<std::string>* texts = nullptr) {
  auto c = d.connect();
  std::vector<json> notes;
  params["stream"] = texts != nullptr;
  auto r = c->call(request(1, "generate", params), &notes);
  EXPECT_TRUE(r && r->contains("result")) << (r ? r->dump() : "no answer");
  if (texts)
    for (const json& n : notes)
      if (!n["params"]["text"].get<std::string>().empty())
        texts->push_back(n["params"]["text"].get<std::string>());
  return r && r->contains("result") ? (*r)["result"] : json::object();
}

bool rpc_alive(const Daemon& d) {
  auto c = d.connect();
  auto r = c->call(request(9, "health"));
  return r && r->contains("result");
}

class DaemonHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test_util::on_path("curl"))
      GTEST_SKIP() << "curl is not installed (scripts/install-deps.sh installs it)";
  }
  std::unique_ptr<Daemon> start(std::vector<std::string> args = {}) {
    auto d = std::make_unique<Daemon>(std::move(args));
    EXPECT_TRUE(d->wait_ready()) << d->log();
    return d;
  }
};

const std::string kPrompt = "Q: What is the difference between a cat and a lion? A:";

TEST_F(DaemonHttpTest, EveryEndpointAnswersOnTheSocket) {
  auto d = start();
  const HttpAnswer health = curl(*d, "GET", "/health");
  EXPECT_EQ(health.status, 200) << health.body;
  EXPECT_EQ(health.doc()["status"], "ok");

  const HttpAnswer models = curl(*d, "GET", "/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  EXPECT_EQ(models.doc()["object"], "list");
  ASSERT_EQ(models.doc()["data"].size(), 1u);
  EXPECT_EQ(models.doc()["data"][0]["id"], "fortunes-char");
  EXPECT_EQ(models.doc()["data"][0]["max_model_len"], 256);

  // Greedy and seeded: the text JSON-RPC gives for the same request.
  for (const auto& [temperature, seed] : {std::pair{0.0, 0}, std::pair{0.8, 7}}) {
    SCOPED_TRACE("temperature " + std::to_string(temperature));
    const json params = {
        {"prompt", kPrompt}, {"max_tokens", 20}, {"temperature", temperature}, {"seed", seed}};
    const json rpc = rpc_generate(*d, params);
    json body = params;
    body["model"] = "fortunes-char";
    const HttpAnswer a = curl(*d, "POST", "/v1/completions", body);
    ASSERT_EQ(a.status, 200) << a.body;
    const json doc = a.doc();
    EXPECT_EQ(doc["object"], "text_completion");
    EXPECT_EQ(doc["model"], "fortunes-char");
    ASSERT_EQ(doc["choices"].size(), 1u);
    EXPECT_EQ(doc["choices"][0]["text"], rpc["text"]);
    EXPECT_EQ(doc["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(doc["usage"]["prompt_tokens"], rpc["prompt_tokens"]);
    EXPECT_EQ(doc["usage"]["completion_tokens"], 20);
    EXPECT_EQ(doc["usage"]["total_tokens"], rpc["prompt_tokens"].get<int>() + 20);
    EXPECT_EQ(doc["seed"], seed);
  }
  // Without a seed, a random one, which the answer names and which replays
  // the text.
  const json unseeded = {{"prompt", kPrompt}, {"max_tokens", 20}, {"temperature", 0.8}};
  const HttpAnswer drawn = curl(*d, "POST", "/v1/completions", unseeded);
  ASSERT_EQ(drawn.status, 200) << drawn.body;
  ASSERT_TRUE(drawn.doc()["seed"].is_number_unsigned()) << drawn.body;
  json replay = unseeded;
  replay["seed"] = drawn.doc()["seed"];
  EXPECT_EQ(rpc_generate(*d, replay)["text"], drawn.doc()["choices"][0]["text"]);

  // Chat: the conversation through the model's template (Q: and A:), then
  // as a completion of that text.
  const json chat = {{"messages",
                      {{{"role", "system"}, {"content", "Be brief."}},
                       {{"role", "user"}, {"content", "What is love?"}}}},
                     {"max_tokens", 12},
                     {"temperature", 0}};
  const HttpAnswer c = curl(*d, "POST", "/v1/chat/completions", chat);
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.doc()["object"], "chat.completion");
  EXPECT_EQ(c.doc()["choices"][0]["message"]["role"], "assistant");
  const json same = rpc_generate(*d, {{"prompt", "Be brief.\nQ: What is love?\nA:"},
                                      {"max_tokens", 12},
                                      {"temperature", 0},
                                      {"stop", {"\nQ:"}}});
  EXPECT_EQ(c.doc()["choices"][0]["message"]["content"], same["text"]);
  EXPECT_TRUE(rpc_alive(*d));
}

// Each daemon numbers its requests from 1: the completion ids of two
// daemons (a fleet behind a router, or one daemon and its restart) differ
// all the same, and one daemon's differ from each other.
TEST_F(DaemonHttpTest, CompletionIdsDoNotRepeatAcrossDaemons) {
  auto a = start(), b = start();
  const json body = {{"prompt", kPrompt}, {"max_tokens", 2}};
  std::set<std::string> ids;
  for (const Daemon* d : {a.get(), b.get(), a.get()}) {
    const HttpAnswer r = curl(*d, "POST", "/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    const std::string id = r.doc()["id"];
    EXPECT_TRUE(id.starts_with("cmpl-")) << id;
    EXPECT_TRUE(ids.insert(id).second) << id << " was given twice";
  }
  const HttpAnswer chat =
      curl(*b, "POST", "/v1/chat/completions",
           json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}});
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_TRUE(chat.doc()["id"].get<std::string>().starts_with("chatcmpl-")) << chat.body;
}

TEST_F(DaemonHttpTest, AStreamCarriesTheJsonRpcTokensAndEndsWithDone) {
  auto d = start();
  const json params = {{"prompt", kPrompt}, {"max_tokens", 16}, {"temperature", 0.8}, {"seed", 3}};
  std::vector<std::string> rpc_texts;
  const json rpc = rpc_generate(*d, params, &rpc_texts);
  json body = params;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  const HttpAnswer a = curl(*d, "POST", "/v1/completions", body);
  ASSERT_EQ(a.status, 200) << a.body;
  const std::vector<json> got = events(a.body);
  ASSERT_GE(got.size(), 3u) << a.body;
  EXPECT_EQ(got.back(), "[DONE]");
  std::vector<std::string> texts;
  std::string finish;
  json usage;
  for (std::size_t i = 0; i + 1 < got.size(); ++i) {
    const json& e = got[i];
    ASSERT_TRUE(e.is_object()) << a.body;
    EXPECT_EQ(e["object"], "text_completion");
    if (e.contains("usage")) {
      usage = e["usage"];
      EXPECT_TRUE(e["choices"].empty());
      continue;
    }
    const json& choice = e["choices"][0];
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
    if (!choice["text"].get<std::string>().empty()) texts.push_back(choice["text"]);
  }
  EXPECT_EQ(texts, rpc_texts);  // the same pieces, in the same order
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(usage["completion_tokens"], 16);

  // Chat streams deltas, the first naming the role.
  json chat = {{"messages", {{{"role", "user"}, {"content", "Why?"}}}},
               {"max_tokens", 6},
               {"temperature", 0},
               {"stream", true}};
  const HttpAnswer c = curl(*d, "POST", "/v1/chat/completions", chat);
  ASSERT_EQ(c.status, 200) << c.body;
  const std::vector<json> deltas = events(c.body);
  ASSERT_GE(deltas.size(), 2u);
  EXPECT_EQ(deltas.front()["object"], "chat.completion.chunk");
  EXPECT_EQ(deltas.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(deltas.back(), "[DONE]");
}

TEST_F(DaemonHttpTest, PromptListsTokenIdsAndSamplesAreChoicesInOrder) {
  auto d = start();
  const json rpc_ids =
      rpc_generate(*d, {{"prompt", "Q: Why?\nA:"}, {"max_tokens", 4}, {"temperature", 0}});
  const HttpAnswer a = curl(*d, "POST", "/v1/completions",
                            json{{"prompt", {"Q: Why?\nA:", "Q: Who?\nA:"}},
                                 {"n", 2},
                                 {"max_tokens", 6},
                                 {"temperature", 0.9},
                                 {"seed", 11}});
  ASSERT_EQ(a.status, 200) << a.body;
  const json choices = a.doc()["choices"];
  ASSERT_EQ(choices.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(choices[i]["index"], i);
  // Choice 2 is the second prompt's sample 0: that prompt alone, n = 1.
  const json alone = rpc_generate(
      *d, {{"prompt", "Q: Who?\nA:"}, {"max_tokens", 6}, {"temperature", 0.9}, {"seed", 11}});
  EXPECT_EQ(choices[2]["text"], alone["text"]);
  EXPECT_EQ(a.doc()["usage"]["completion_tokens"], 24);

  // Token ids as the prompt, and echo of a text prompt.
  const HttpAnswer ids =
      curl(*d, "POST", "/v1/completions", json{{"prompt", rpc_ids["tokens"]}, {"max_tokens", 3}});
  EXPECT_EQ(ids.status, 200) << ids.body;
  const HttpAnswer echo =
      curl(*d, "POST", "/v1/completions",
           json{{"prompt", "Q: Why?\nA:"}, {"max_tokens", 4}, {"temperature", 0}, {"echo", true}});
  ASSERT_EQ(echo.status, 200) << echo.body;
  EXPECT_EQ(echo.doc()["choices"][0]["text"], "Q: Why?\nA:" + rpc_ids["text"].get<std::string>());
}

TEST_F(DaemonHttpTest, LogprobsAreTheEnginesInOpenAisShapes) {
  auto d = start();
  const json rpc = rpc_generate(
      *d, {{"prompt", kPrompt}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 2}});
  const json want = rpc["samples"][0]["logprobs"];
  ASSERT_EQ(want.size(), 8u) << rpc.dump();

  const json body = {{"prompt", kPrompt}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 2}};
  const HttpAnswer a = curl(*d, "POST", "/v1/completions", body);
  ASSERT_EQ(a.status, 200) << a.body;
  const json lp = a.doc()["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 8u) << lp;
  std::string joined;
  for (std::size_t t = 0; t < 8; ++t) {
    EXPECT_EQ(lp["tokens"][t], want[t]["text"]);
    EXPECT_EQ(lp["token_logprobs"][t], want[t]["logprob"]);
    EXPECT_EQ(lp["text_offset"][t], joined.size());
    joined += lp["tokens"][t].get<std::string>();
    ASSERT_EQ(lp["top_logprobs"][t].size(), 2u);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(lp["top_logprobs"][t][want[t]["text"].get<std::string>()], want[t]["logprob"]);
  }
  EXPECT_EQ(joined, a.doc()["choices"][0]["text"]);

  // Streamed: the same tokens, chunk by chunk.
  json stream = body;
  stream["stream"] = true;
  const HttpAnswer sa = curl(*d, "POST", "/v1/completions", stream);
  ASSERT_EQ(sa.status, 200) << sa.body;
  json streamed = json::array();
  for (const json& e : events(sa.body)) {
    if (!e.is_object() || e["choices"].empty() || e["choices"][0]["logprobs"].is_null()) continue;
    for (const json& t : e["choices"][0]["logprobs"]["tokens"]) streamed.push_back(t);
  }
  EXPECT_EQ(streamed, lp["tokens"]);

  // Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs"}]}.
  const HttpAnswer c = curl(*d, "POST", "/v1/chat/completions",
                            json{{"messages", {{{"role", "user"}, {"content", "Why?"}}}},
                                 {"max_tokens", 4},
                                 {"logprobs", true},
                                 {"top_logprobs", 2}});
  ASSERT_EQ(c.status, 200) << c.body;
  const json content = c.doc()["choices"][0]["logprobs"]["content"];
  ASSERT_FALSE(content.empty()) << c.body;
  EXPECT_TRUE(content[0]["logprob"].is_number());
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(content[0]["bytes"].size(), content[0]["token"].get<std::string>().size());
  EXPECT_EQ(curl(*d, "POST", "/v1/completions", json{{"prompt", "x"}, {"logprobs", 21}}).status,
            400);
  EXPECT_EQ(
      curl(*d, "POST", "/v1/completions", json{{"prompt", "x"}, {"logprobs", 1}, {"echo", true}})
          .status,
      400);
}

TEST_F(DaemonHttpTest, CachedPromptTokensAreInTheUsage) {
  auto d = start();
  const json body = {{"prompt", kPrompt + kPrompt}, {"max_tokens", 2}};
  const HttpAnswer first = curl(*d, "POST", "/v1/completions", body);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.doc()["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const HttpAnswer second = curl(*d, "POST", "/v1/completions", body);
  ASSERT_EQ(second.status, 200) << second.body;
  const json usage = second.doc()["usage"];
  EXPECT_GE(usage["prompt_tokens_details"]["cached_tokens"].get<int>(), 96) << usage;
  EXPECT_EQ(usage["kvtier_cached_tokens"]["l1"], usage["prompt_tokens_details"]["cached_tokens"]);
}

TEST_F(DaemonHttpTest, ErrorsAreOpenAiErrorObjectsWithTheirStatus) {
  auto d = start({"--max-line-bytes", "2048"});
  const auto expect_error = [&](const HttpAnswer& a, int status, const std::string& param) {
    EXPECT_EQ(a.status, status) << a.body;
    const json e = a.doc()["error"];
    ASSERT_TRUE(e.is_object()) << a.body;
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty());
    EXPECT_TRUE(e["type"].is_string());
    if (!param.empty()) {
      EXPECT_EQ(e["param"], param) << a.body;
    }
  };
  expect_error(curl(*d, "POST", "/v1/completions", json{{"prompt", "x"}, {"temperature", -1}}), 400,
               "temperature");
  expect_error(curl(*d, "POST", "/v1/completions", json{{"prompt", "x"}, {"max_tokens", "ten"}}),
               400, "max_tokens");
  expect_error(curl(*d, "POST", "/v1/completions", json{{"prompt", "x"}, {"bogus", 1}}), 400,
               "bogus");
  expect_error(curl(*d, "POST", "/v1/completions", json{{"max_tokens", 3}}), 400, "prompt");
  const HttpAnswer model =
      curl(*d, "POST", "/v1/completions", json{{"model", "gpt-4"}, {"prompt", "x"}});
  expect_error(model, 404, "model");
  EXPECT_EQ(model.doc()["error"]["code"], "model_not_found");
  // The engine's own refusal: a token id outside the vocabulary.
  expect_error(curl(*d, "POST", "/v1/completions", json{{"prompt", {5, 99999}}}), 400, "");
  expect_error(curl(*d, "GET", "/v1/nothing"), 404, "");
  expect_error(curl(*d, "GET", "/v1/completions"), 405, "");
  expect_error(curl(*d, "POST", "/v1/completions", std::nullopt, "-d '{not json'"), 400, "");
  expect_error(curl(*d, "POST", "/v1/completions", json{{"prompt", std::string(4000, 'a')}}), 413,
               "");
  EXPECT_TRUE(rpc_alive(*d));
}

TEST_F(DaemonHttpTest, BadHttpGetsAnErrorOrAClosedConnectionAndJsonRpcGoesOn) {
  auto d = start({"--http-timeout", "0.5"});
  const auto status_of = [](const std::string& answer) {
    return answer.rfind("HTTP/1.1 ", 0) == 0 ? std::atoi(answer.c_str() + 9) : 0;
  };
  // A request line that is not HTTP.
  EXPECT_EQ(status_of(raw_exchange(*d, "GET / HTTQ/9\r\n\r\n")), 400);
  EXPECT_TRUE(rpc_alive(*d));
  // A header block over its limit.
  const std::string big = "GET /health HTTP/1.1\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n";
  EXPECT_EQ(status_of(raw_exchange(*d, big)), 431);
  EXPECT_TRUE(rpc_alive(*d));
  // A chunked body whose chunk is not the size it says.
  const std::string lying =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "64\r\n{\"prompt\": \"x\"}\r\nzz\r\n\r\n";
  const std::string lied = raw_exchange(*d, lying, 3s);
  EXPECT_TRUE(status_of(lied) == 400 || status_of(lied) == 408) << lied;
  EXPECT_TRUE(rpc_alive(*d));
  // A body that never comes whole (slow-loris): 408 after http_timeout.
  const std::string slow =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro";
  EXPECT_EQ(status_of(raw_exchange(*d, slow)), 408);
  // A connection that sends nothing after its first request is closed.
  const std::string idle = raw_exchange(*d, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_of(idle), 200) << idle;
  EXPECT_TRUE(rpc_alive(*d));
  // Pipelined requests are answered in order on one connection.
  const std::string two = raw_exchange(
      *d, "GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(two.find("\"status\":\"ok\""), std::string::npos) << two;
  EXPECT_NE(two.find("fortunes-char"), std::string::npos) << two;
  EXPECT_LT(two.find("\"status\":\"ok\""), two.find("fortunes-char"));
  EXPECT_TRUE(rpc_alive(*d));
}

TEST_F(DaemonHttpTest, AClientThatExpects100ContinueIsToldToGoOn) {
  auto d = start();
  Client c(d->socket_path());
  const std::string body = json{{"prompt", "Q: Why?\nA:"}, {"max_tokens", 3}}.dump();
  ASSERT_TRUE(
      c.send_raw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                 "Content-Length: " +
                 std::to_string(body.size()) + "\r\n\r\n"));
  const auto go_on = c.read_raw(10s);
  ASSERT_TRUE(go_on.has_value());
  EXPECT_EQ(go_on->rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << *go_on;
  ASSERT_TRUE(c.send_raw(body));
  std::string answer = go_on->substr(std::min(go_on->size(), std::size_t{25}));
  while (answer.find("usage") == std::string::npos) {
    auto more = c.read_raw(10s);
    if (!more) break;
    answer += *more;
  }
  EXPECT_NE(answer.find("HTTP/1.1 200 OK"), std::string::npos) << answer;
}

TEST_F(DaemonHttpTest, AClientThatLeavesCancelsItsGeneration) {
  auto d = start();
  Client c(d->socket_path());
  ASSERT_TRUE(c.valid());
  const std::string body =
      json{{"prompt", "Q:"}, {"max_tokens", 250}, {"stream", true}, {"temperature", 0.8}}.dump();
  ASSERT_TRUE(c.send_raw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\n\r\n" + body));
  ASSERT_TRUE(c.read_raw(10s).has_value());  // the stream has begun
  c.close();
  auto rpc = d->connect();
  long cancelled = 0;
  for (int i = 0; i < 500 && cancelled == 0; ++i) {
    auto s = rpc->call(request(2, "stats"));
    cancelled = s ? (*s)["result"].value("requests_cancelled", 0L) : 0;
    if (cancelled == 0) std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(cancelled, 1);
}

TEST_F(DaemonHttpTest, AFullQueueIs429AndADrainingDaemon503) {
  auto d = start({"--max-pending", "4", "--max-batch-size", "16", "--drain-timeout", "60"});
  // Four requests of 16 samples of 250 tokens fill the queue for seconds.
  Client hold(d->socket_path());
  std::string lines;
  for (int i = 0; i < 4; ++i) {
    json params = generate_params("Q:", 250, 0.8f, static_cast<std::uint64_t>(i));
    params["n"] = 16;
    lines += request(i, "generate", params).dump() + "\n";
  }
  ASSERT_TRUE(hold.send_raw(lines));
  auto admin = d->connect();
  for (int i = 0; i < 500; ++i) {
    auto s = admin->call(request(2, "stats"));
    if (s && (*s)["result"].value("pending", 0) == 4) break;
    std::this_thread::sleep_for(10ms);
  }
  const HttpAnswer full = curl(*d, "POST", "/v1/completions", json{{"prompt", "x"}});
  EXPECT_EQ(full.status, 429) << full.body;
  EXPECT_EQ(full.doc()["error"]["type"], "rate_limit_error");

  // A keep-alive connection made before the drain asks on it after.
  Client keep(d->socket_path());
  const auto answer_on = [&keep](const std::string& needle) {
    std::string answer;
    while (answer.find(needle) == std::string::npos) {
      auto more = keep.read_raw(10s);
      if (!more) break;
      answer += *more;
    }
    return answer;
  };
  ASSERT_TRUE(keep.send_raw("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_NE(answer_on("\"ok\"}").find("200 OK"), std::string::npos);
  ASSERT_TRUE(admin->call(request(3, "shutdown")).has_value());
  ASSERT_TRUE(keep.send_raw("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string health = answer_on("\"draining\"}");
  EXPECT_EQ(health.rfind("HTTP/1.1 503", 0), 0u) << health;
  const std::string body = json{{"prompt", "x"}}.dump();
  ASSERT_TRUE(keep.send_raw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body));
  const std::string refused = answer_on("}}");
  EXPECT_EQ(refused.rfind("HTTP/1.1 503", 0), 0u) << refused;
}

TEST_F(DaemonHttpTest, OnTcpBeyondLoopbackAKeyIsRequiredAndChecked) {
  test_util::TempDir dir;
  const std::string port = std::to_string(test_util::free_tcp_port());
  // Every interface, no key: refused before the model loads.
  const RunResult open = run_kvtierd(
      {"--socket", (dir.path() / "s.sock").string(), "--http-listen", "0.0.0.0:" + port});
  EXPECT_TRUE(exited_nonzero(open));
  EXPECT_TRUE(test_util::contains(open.err, "http_api_key_file")) << open.err;
  for (const char* bad : {"localhost:0", "1.2.3:80", "[::1]", "eighty"}) {
    const RunResult r =
        run_kvtierd({"--socket", (dir.path() / "s.sock").string(), "--http-listen", bad});
    EXPECT_TRUE(exited_nonzero(r)) << bad;
    EXPECT_TRUE(test_util::contains(r.err, "http_listen")) << r.err;
  }

  const std::filesystem::path key = dir.path() / "key";
  std::ofstream(key) << "0123456789abcdef0123\n";
  std::filesystem::permissions(
      key, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto d = start({"--http-listen", "0.0.0.0:" + port, "--http-api-key-file", key.string()});
  const auto tcp = [&](const std::string& path, const std::string& extra) {
    return test_util::curl("", d->dir(), "GET", path, std::nullopt, extra, std::stoi(port)).status;
  };
  EXPECT_EQ(tcp("/v1/models", ""), 401);
  EXPECT_EQ(tcp("/v1/models", "-H 'Authorization: Bearer wrong-key-0123456789'"), 401);
  EXPECT_EQ(tcp("/v1/models", "-H 'Authorization: Bearer 0123456789abcdef0123'"), 200);
  EXPECT_EQ(tcp("/health", ""), 200);  // for load balancers
  EXPECT_EQ(tcp("/metrics", ""), 401);
  // The socket is guarded by its file mode, not the key.
  EXPECT_EQ(curl(*d, "GET", "/v1/models").status, 200);
}

TEST_F(DaemonHttpTest, MetricsPassPromtoolAndMoveAsARequestsBlocksMove) {
  auto d = start();
  const HttpAnswer before = curl(*d, "GET", "/metrics");
  ASSERT_EQ(before.status, 200) << before.body;
  EXPECT_GT(metric(before.body, "kvtier_uptime_seconds"), 0);
  EXPECT_GT(metric(before.body, "kvtier_resident_memory_bytes"), 0);
  EXPECT_EQ(metric(before.body, "kvtier_tier_hits_total{tier=\"l1\"}"), 0);
  EXPECT_NE(before.body.find("kvtier_build_info{version=\""), std::string::npos);

  // A prompt twice (the second finds its blocks in L1), then its blocks
  // flushed down to L2 and the prompt a third time (promoted from L2).
  const json body = {{"prompt", kPrompt + kPrompt}, {"max_tokens", 2}};
  for (int i = 0; i < 2; ++i) ASSERT_EQ(curl(*d, "POST", "/v1/completions", body).status, 200);
  auto admin = d->connect();
  ASSERT_TRUE(admin->call(request(1, "cache.flush", {{"tier", "l1"}})).has_value());
  ASSERT_EQ(curl(*d, "POST", "/v1/completions", body).status, 200);
  const HttpAnswer after = curl(*d, "GET", "/metrics");
  ASSERT_EQ(after.status, 200);
  const std::string& m = after.body;
  EXPECT_EQ(metric(m, "kvtier_requests_finished_total{finish_reason=\"length\"}"), 3);
  EXPECT_EQ(metric(m, "kvtier_time_to_first_token_seconds_count"), 3);
  EXPECT_EQ(metric(m, "kvtier_http_responses_total{route=\"/v1/completions\",code=\"200\"}"), 3);
  EXPECT_GT(metric(m, "kvtier_tier_hits_total{tier=\"l1\"}"), 0);
  EXPECT_GT(metric(m, "kvtier_tier_hits_total{tier=\"l2\"}"), 0);
  EXPECT_GT(metric(m, "kvtier_tier_demotions_total{tier=\"l2\"}"), 0);
  EXPECT_GT(metric(m, "kvtier_tier_transfer_seconds_count{tier=\"l2\"}"), 0);
  EXPECT_GT(metric(m, "kvtier_prompt_tokens_cached_total{tier=\"l2\"}"), 0);
  EXPECT_EQ(metric(m, "kvtier_prompt_tokens_total"),
            metric(m, "kvtier_prompt_tokens_computed_total") +
                metric(m, "kvtier_prompt_tokens_cached_total{tier=\"l1\"}") +
                metric(m, "kvtier_prompt_tokens_cached_total{tier=\"l2\"}"));

  if (!test_util::on_path("promtool"))
    GTEST_SKIP() << "promtool is not installed (Debian's prometheus package; "
                    "scripts/install-deps.sh installs it): the format was not checked";
  const test_util::CommandResult check = test_util::promtool_check(m, d->dir());
  EXPECT_EQ(check.status, 0) << check.output;
  EXPECT_EQ(check.output, "") << "promtool's lint";
}

}  // namespace
}  // namespace kvtier
