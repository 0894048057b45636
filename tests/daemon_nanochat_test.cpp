// kvtierd serving a nanochat model (random weights and a small tokenizer,
// nanochat_test_util.h) through the same seam as GPT-2: a text prompt begins
// with <|bos|>, as nanochat's base prompts do, and the tokens are the
// engine computes in-process, from L1, from L2 after a flush and from L3
// after a restart, through Redis from another daemon, with every shared
// prefix's smear input (the token before each chunk) carried by the
// request's own ids. A conversation is rendered with nanochat's
// turn markers on every front door (JSON-RPC, HTTP, and the router in
// front), and ends at <|assistant_end|>.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "daemon_test_util.h"
#include "engine/model/generator.h"
#include "engine/model/model.h"
#include "engine/model/tokenizer.h"
#include "http_test_util.h"
#include "nanochat_test_util.h"
#include "redis_server.h"
#include "router_test_util.h"
#include "wire/chat_template.h"
#include "wire/prompt.h"

namespace kvtier {
namespace {

using namespace daemon_test;
using nanochat_test::NanochatFolder;
using nlohmann::json;

// Three full blocks and more of this tokenizer's mostly one-byte tokens.
const std::string kShared =
    "the other one at the station ran to the sea and on the hill the rest sat still: ";

// What the engine gives in-process for a prompt, or for a conversation as
// the model's chat format renders it: the reference for every daemon answer.
Generation reference_run(const NanochatFolder& folder, wire::Prompt prompt,
                         const std::vector<wire::ChatMessage>& conversation = {},
                         EvictionPolicy eviction = EvictionPolicy::none()) {
  auto model = Model::load(folder.path());
  EXPECT_TRUE(model.has_value()) << model.error();
  auto tokenizer = Tokenizer::load((*model)->config().tokenizer);
  EXPECT_TRUE(tokenizer.has_value()) << tokenizer.error();
  if (!model || !tokenizer) return {};
  GenerateOptions options;
  if (!conversation.empty()) {
    auto chat = wire::ChatTemplate::load(folder.path().string(), (*model)->config().tokenizer);
    EXPECT_TRUE(chat.has_value());
    auto rendered = chat->render(conversation);
    EXPECT_TRUE(rendered.has_value());
    prompt = rendered->prompt;
    options.stop_token_ids = rendered->stop_token_ids;
  }
  auto ids = wire::prompt_tokens(**tokenizer, prompt);
  EXPECT_TRUE(ids.has_value());
  EXPECT_EQ(ids->front(), (*tokenizer)->begin_of_text()) << "a text begins with <|bos|>";
  tiers::BlockPool pool((*model)->kv_layout(16).block_bytes(), 32);
  options.sampling = {0.0f, 0, 1.0f, 0};
  options.max_tokens = 12;
  options.eviction = eviction;
  auto out = generate(**model, pool, tokenizer->get(), *ids, options);
  EXPECT_TRUE(out.has_value()) << out.error();
  return out ? *out : Generation{};
}

std::vector<int> reference(const NanochatFolder& folder, const std::string& prompt) {
  return reference_run(folder, prompt).tokens;
}

json generate_greedy(Client& c, const std::string& prompt) {
  auto r = c.call(request(1, "generate", generate_params(prompt, 12, 0.0f, 0)));
  EXPECT_TRUE(r && r->contains("result")) << (r ? r->dump() : "no answer");
  return r && r->contains("result") ? (*r)["result"] : json::object();
}

std::vector<int> tokens_of(const json& result) { return result["tokens"].get<std::vector<int>>(); }

TEST(DaemonNanochatTest, ServesTheEnginesTokensFromEveryTierAndAfterARestart) {
  for (const nanochat_test::Shape shape : {nanochat_test::Shape{5, 2}, {3, 4}}) {
    NanochatFolder folder(shape, 256);  // prefill costs more than an L3 read
    test_util::TempDir dir;
    const std::vector<std::string> args = {"--model",        folder.path().string(),
                                           "--l3-path",      (dir.path() / "l3").string(),
                                           "--l3-bytes",     "64M",
                                           "--write-policy", "write_through",
                                           "--device",       "auto"};
    const std::vector<int> one = reference(folder, kShared + "one");
    const std::vector<int> two = reference(folder, kShared + "two");
    ASSERT_FALSE(one.empty());
    {
      Daemon d(args);
      ASSERT_TRUE(d.wait_ready()) << d.log();
      auto c = d.connect();
      const json first = generate_greedy(*c, kShared + "one");
      EXPECT_EQ(tokens_of(first), one) << first.dump();
      EXPECT_EQ(first["prompt_tokens"],
                1 + Tokenizer::load(Model::load(folder.path()).value()->config().tokenizer)
                        .value()
                        ->encode(kShared + "one")
                        ->size())
          << "<|bos|> and the text's own tokens";
      const json second = generate_greedy(*c, kShared + "two");
      EXPECT_GT(second["cached_tokens"]["l1"].get<int>(), 0) << second.dump();
      EXPECT_EQ(tokens_of(second), two);
      auto flushed = c->call(request(2, "cache.flush", {{"tier", "l1"}}));
      ASSERT_TRUE(flushed && flushed->contains("result")) << (flushed ? flushed->dump() : "");
      const json from_l2 = generate_greedy(*c, kShared + "two");
      EXPECT_GT(from_l2["cached_tokens"]["l2"].get<int>(), 0) << from_l2.dump();
      EXPECT_EQ(tokens_of(from_l2), two);
      shutdown(d);
    }
    // A restart reads the prefix from L3, unless the cost model, timed on a
    // busy machine, finds recomputing it cheaper: then another restart is
    // asked (as daemon_remote_test does for its remote tier).
    json from_l3;
    for (int attempt = 0; attempt < 3; ++attempt) {
      Daemon d(args);
      ASSERT_TRUE(d.wait_ready()) << d.log();
      from_l3 = generate_greedy(*d.connect(), kShared + "two");
      EXPECT_EQ(tokens_of(from_l3), two) << "generation " << shape.generation;
      shutdown(d);
      if (from_l3["cached_tokens"]["l3"].get<int>() > 0) break;
    }
    EXPECT_GT(from_l3["cached_tokens"]["l3"].get<int>(), 0) << from_l3.dump();
  }
}

// The remote tier: a prefix one kvtierd computed, read from a real
// redis-server by another, gives the engine's tokens (the smear input at
// the first computed position is the request's own previous id, which no
// block carries).
TEST(DaemonNanochatTest, APrefixSharedThroughRedisGivesAnotherDaemonTheSameTokens) {
  SKIP_WITHOUT_REDIS();
  test_util::RedisServer redis;
  ASSERT_TRUE(redis.ready()) << redis.log();
  NanochatFolder folder({5, 2}, 256);  // prefill costs more than a round trip
  const std::vector<std::string> args = {
      "--model", folder.path().string(), "--remote", redis.socket_path(), "--device", "cpu"};
  const std::string prompt = kShared + kShared + "two";
  const std::vector<int> want = reference(folder, prompt);
  {
    Daemon a(args);
    ASSERT_TRUE(a.wait_ready()) << a.log();
    auto c = a.connect();
    EXPECT_EQ(tokens_of(generate_greedy(*c, kShared + kShared + "one")),
              reference(folder, kShared + kShared + "one"));
    // Until its writes to Redis have landed (after the answer), bounded.
    for (int i = 0; i < 500; ++i) {
      auto t = c->call(request(3, "tiers", json::object()));
      if (t && (*t)["result"]["tiers"]["remote"].value("demotions", 0L) >= 4) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    shutdown(a);
  }
  // A daemon whose start-up timed Redis slow on a busy machine may rightly
  // recompute instead: another is asked, at most three.
  json from_remote;
  for (int attempt = 0; attempt < 3; ++attempt) {
    Daemon b(args);
    ASSERT_TRUE(b.wait_ready()) << b.log();
    from_remote = generate_greedy(*b.connect(), prompt);
    EXPECT_EQ(tokens_of(from_remote), want);
    shutdown(b);
    if (from_remote["cached_tokens"]["remote"].get<int>() > 0) break;
  }
  EXPECT_GT(from_remote["cached_tokens"]["remote"].get<int>(), 0) << from_remote.dump();
}

TEST(DaemonNanochatTest, TheRouterInFrontGivesTheDaemonsTokens) {
  NanochatFolder folder({5, 2});
  const std::vector<std::string> model = {"--model", folder.path().string()};
  Daemon a(model), b(model);
  ASSERT_TRUE(a.wait_ready()) << a.log();
  ASSERT_TRUE(b.wait_ready()) << b.log();
  RouterProcess router({a.socket_path(), b.socket_path()}, model);
  ASSERT_TRUE(router.wait_usable(0, true)) << router.log();
  ASSERT_TRUE(router.wait_usable(1, true)) << router.log();
  auto c = router.connect();
  for (const char* tail : {"one", "two", "one"}) {
    const json routed = generate_greedy(*c, kShared + tail);
    EXPECT_EQ(tokens_of(routed), reference(folder, kShared + tail)) << routed.dump();
  }

  // A daemon whose model differs in its KV heads alone is not the fleet's.
  NanochatFolder fewer_kv_heads({5, 4});
  Daemon other({"--model", fewer_kv_heads.path().string()});
  ASSERT_TRUE(other.wait_ready()) << other.log();
  RouterProcess mixed({a.socket_path(), other.socket_path()}, model);
  const json refused = mixed.wait_for(1, [](const json& d) {
    return test_util::contains(d.value("last_error", ""), "another model");
  });
  EXPECT_EQ(refused.value("usable", true), false) << refused.dump();
  EXPECT_TRUE(mixed.wait_usable(0, true)) << mixed.log();
}

// A conversation as JSON-RPC's generate and /v1/chat/completions take it.
const std::vector<wire::ChatMessage> kConversation = {{"system", "Answer in one line."},
                                                      {"user", kShared + "who ran?"},
                                                      {"assistant", "the other one"},
                                                      {"user", "and <|assistant_end|> then?"}};

json messages_json(const std::vector<wire::ChatMessage>& conversation) {
  json out = json::array();
  for (const auto& m : conversation) out.push_back({{"role", m.role}, {"content", m.content}});
  return out;
}

// `text` as a JSON answer carries it: bytes that are not UTF-8 replaced.
std::string as_json_text(const std::string& text) {
  return json::parse(json(text).dump(-1, ' ', false, json::error_handler_t::replace))
      .get<std::string>();
}

// The conversation through `socket`'s JSON-RPC and HTTP: the engine's tokens
// and text for its rendering; a conversation nanochat was not trained on is
// refused on both, naming the message.
void expect_chat_as_the_engine_renders_it(const std::string& socket, const Generation& want,
                                          const std::filesystem::path& dir) {
  Client c(socket);
  ASSERT_TRUE(c.valid());
  const json params = {
      {"messages", messages_json(kConversation)}, {"max_tokens", 12}, {"temperature", 0}};
  auto r = c.call(request(1, "generate", params));
  ASSERT_TRUE(r && r->contains("result")) << (r ? r->dump() : "no answer");
  EXPECT_EQ(tokens_of((*r)["result"]), want.tokens) << r->dump();
  EXPECT_EQ((*r)["result"]["text"], as_json_text(want.text));

  const test_util::HttpAnswer answer = test_util::curl(
      socket, dir, "POST", "/v1/chat/completions",
      json{{"messages", messages_json(kConversation)}, {"max_tokens", 12}, {"temperature", 0}});
  ASSERT_EQ(answer.status, 200) << answer.body;
  EXPECT_EQ(answer.doc()["choices"][0]["message"]["content"], as_json_text(want.text))
      << answer.body;

  const json bad = {{"role", "user"}, {"content", "again"}};
  json twice = messages_json(kConversation);
  twice.push_back(bad);
  auto refused = c.call(request(2, "generate", {{"messages", twice}, {"max_tokens", 2}}));
  ASSERT_TRUE(refused && refused->contains("error")) << (refused ? refused->dump() : "none");
  EXPECT_TRUE(
      test_util::contains((*refused)["error"]["message"].get<std::string>(), "message 5 (user)"))
      << refused->dump();
  const test_util::HttpAnswer http_refused = test_util::curl(
      socket, dir, "POST", "/v1/chat/completions", json{{"messages", twice}, {"max_tokens", 2}});
  EXPECT_EQ(http_refused.status, 400) << http_refused.body;
  EXPECT_TRUE(test_util::contains(http_refused.body, "message 5 (user)")) << http_refused.body;
}

TEST(DaemonNanochatTest, AConversationIsRenderedWithTheTurnMarkersOnEveryFrontDoor) {
  NanochatFolder folder({5, 2});
  const Generation want = reference_run(folder, "", kConversation);
  ASSERT_FALSE(want.tokens.empty());
  const std::vector<std::string> model = {"--model", folder.path().string()};
  Daemon daemon(model);
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
  test_util::TempDir dir;
  expect_chat_as_the_engine_renders_it(daemon.socket_path(), want, dir.path());
  RouterProcess router({daemon.socket_path()}, model);
  ASSERT_TRUE(router.wait_usable(0, true)) << router.log();
  expect_chat_as_the_engine_renders_it(router.socket_path(), want, dir.path());
}

TEST(DaemonNanochatTest, AnotherModelOnTheSameL3NeverHitsAndH2oEvictsAsTheEngineDoes) {
  NanochatFolder a({5, 2}), b({4, 2});
  test_util::TempDir dir;
  auto args = [&](const NanochatFolder& f) {
    return std::vector<std::string>{
        "--model", f.path().string(), "--l3-path",    (dir.path() / "l3").string(), "--l3-bytes",
        "64M",     "--write-policy",  "write_through"};
  };
  {
    Daemon d(args(a));
    ASSERT_TRUE(d.wait_ready()) << d.log();
    generate_greedy(*d.connect(), kShared + "one");
    shutdown(d);
  }
  Daemon d(args(b));
  ASSERT_TRUE(d.wait_ready()) << d.log();
  const json other = generate_greedy(*d.connect(), kShared + "one");
  EXPECT_EQ(other["cached_tokens"]["l3"], 0) << "a block of another model: " << other.dump();
  EXPECT_EQ(tokens_of(other), reference(b, kShared + "one"));
  shutdown(d);

  // H2O ranks keys by the attention scores the nanochat forward gathers.
  const std::string policy = "h2o:start=16,recent=16,max=48";
  Daemon h2o({"--model", a.path().string(), "--eviction", policy});
  ASSERT_TRUE(h2o.wait_ready()) << h2o.log();
  const std::string prompt = kShared + kShared + "one";
  const json evicting = generate_greedy(*h2o.connect(), prompt);
  const Generation want = reference_run(a, prompt, {}, *EvictionPolicy::parse(policy));
  EXPECT_GT(want.evicted_blocks, 0) << "the prompt must outgrow max";
  EXPECT_EQ(tokens_of(evicting), want.tokens);
  EXPECT_NE(tokens_of(evicting), reference(a, prompt)) << "a cache that evicted nothing";
  shutdown(h2o);
}

// nanochat's calculator, run by kvtierd: a model scripted to write
// <|python_start|>1+2<|python_end|> (after "A", or when its chat turn
// opens) gets <|output_start|>3<|output_end|> forced after it, then
// samples again; the engine's in-process tokens, on JSON-RPC and
// /v1/chat/completions alike, through the router too, and in kvtierctl
// chat. tool_choice "none" (kvtierctl chat --no-tools) and the setting
// tools = none leave the call unanswered: the model writes on (here "Y").
TEST(DaemonNanochatTest, TheModelsCalculatorCallIsAnsweredUnlessToolsAreOff) {
  constexpr int kAssistantStart = 294, kPythonStart = 296, kPythonEnd = 297, kOutputEnd = 299;
  NanochatFolder folder = NanochatFolder::scripted({{'A', kPythonStart},
                                                    {kAssistantStart, kPythonStart},
                                                    {kPythonStart, '1'},
                                                    {'1', '+'},
                                                    {'+', '2'},
                                                    {'2', kPythonEnd},
                                                    {kPythonEnd, 'Y'},
                                                    {kOutputEnd, 'X'}});
  const std::string answered = "<|python_start|>1+2<|python_end|><|output_start|>3<|output_end|>X";
  const std::string unanswered = "<|python_start|>1+2<|python_end|>Y";
  const Generation want = reference_run(folder, "A");
  ASSERT_EQ(want.text.substr(0, answered.size()), answered) << want.text;

  Daemon d({"--model", folder.path().string()});
  ASSERT_TRUE(d.wait_ready()) << d.log();
  Client c(d.socket_path());
  const json result = generate_greedy(c, "A");
  EXPECT_EQ(tokens_of(result), want.tokens);
  EXPECT_EQ(result["text"], want.text);
  json off = generate_params("A", 12, 0.0f, 0);
  off["tool_choice"] = "none";
  auto r = c.call(request(2, "generate", off));
  ASSERT_TRUE(r && r->contains("result")) << (r ? r->dump() : "no answer");
  EXPECT_EQ((*r)["result"]["text"].get<std::string>().substr(0, unanswered.size()), unanswered);
  off["tool_choice"] = "required";
  r = c.call(request(3, "generate", off));
  ASSERT_TRUE(r && r->contains("error")) << (r ? r->dump() : "no answer");
  EXPECT_TRUE(test_util::contains((*r)["error"]["message"].get<std::string>(), "'tool_choice'"));

  test_util::TempDir dir;
  auto chat = [&](const std::string& socket, const json& extra) {
    json body = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
                 {"max_tokens", 12},
                 {"temperature", 0}};
    body.update(extra);
    const test_util::HttpAnswer a =
        test_util::curl(socket, dir.path(), "POST", "/v1/chat/completions", body);
    EXPECT_EQ(a.status, 200) << a.body;
    return a.status == 200 ? a.doc()["choices"][0]["message"]["content"].get<std::string>() : "";
  };
  EXPECT_EQ(chat(d.socket_path(), json::object()).substr(0, answered.size()), answered);
  EXPECT_EQ(chat(d.socket_path(), {{"tool_choice", "none"}}).substr(0, unanswered.size()),
            unanswered);
  // kvtierctl chat, beside kvtierd in the build tree, and its --no-tools.
  const std::string ctl = daemon_test::kCtlPath.string();
  for (const bool tools : {true, false}) {
    std::vector<std::string> args = {
        ctl, "--socket", d.socket_path(), "chat", "-p", "hi", "--temperature", "0", "--max-tokens",
        "12"};
    if (!tools) args.push_back("--no-tools");
    const ProcessResult r = run_process(args, dir.path(), environment_with({}));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(test_util::contains(r.out, tools ? answered : unanswered)) << r.out;
  }
  // The router passes tool_choice on as it came.
  {
    RouterProcess router({d.socket_path()}, {"--model", folder.path().string()});
    ASSERT_TRUE(router.wait_usable(0, true)) << router.log();
    EXPECT_EQ(chat(router.socket_path(), json::object()).substr(0, answered.size()), answered);
    EXPECT_EQ(chat(router.socket_path(), {{"tool_choice", "none"}}).substr(0, unanswered.size()),
              unanswered);
    Client via(router.socket_path());
    off["tool_choice"] = "none";
    auto routed = via.call(request(5, "generate", off));
    ASSERT_TRUE(routed && routed->contains("result")) << (routed ? routed->dump() : "no answer");
    EXPECT_EQ((*routed)["result"]["text"].get<std::string>().substr(0, unanswered.size()),
              unanswered);
  }
  shutdown(d);

  Daemon none({"--model", folder.path().string(), "--tools", "none"});
  ASSERT_TRUE(none.wait_ready()) << none.log();
  Client n(none.socket_path());
  EXPECT_EQ(generate_greedy(n, "A")["text"].get<std::string>().substr(0, unanswered.size()),
            unanswered);
  off["tool_choice"] = "auto";
  r = n.call(request(4, "generate", off));
  ASSERT_TRUE(r && r->contains("result")) << (r ? r->dump() : "no answer");
  EXPECT_EQ((*r)["result"]["text"].get<std::string>().substr(0, unanswered.size()), unanswered)
      << "auto follows the setting";
  EXPECT_EQ(chat(none.socket_path(), json::object()).substr(0, unanswered.size()), unanswered);
  shutdown(none);
}

}  // namespace
}  // namespace kvtier
