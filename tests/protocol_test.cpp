#include "wire/protocol.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace kvtier::wire {
namespace {

using nlohmann::json;

std::string repeat(std::string_view piece, std::size_t times) {
  std::string out;
  out.reserve(piece.size() * times);
  for (std::size_t i = 0; i < times; ++i) out += piece;
  return out;
}

// `depth` arrays, objects, or both alternating, one inside the other.
std::string nested_arrays(std::size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}
std::string nested_objects(std::size_t depth) {
  return repeat(R"({"a":)", depth) + "1" + std::string(depth, '}');
}
std::string nested_mixed(std::size_t depth) {
  std::string open;
  std::string close;
  for (std::size_t i = 0; i < depth; ++i) {
    open += i % 2 == 0 ? "[" : R"({"a":)";
    close += i % 2 == 0 ? "]" : "}";
  }
  if (depth % 2 == 0) open += "1";  // the innermost is an object: it needs a value
  return open + std::string(close.rbegin(), close.rend());
}

std::string request_with_params(const std::string& params) {
  return R"({"jsonrpc":"2.0","id":7,"method":"generate","params":)" + params + "}";
}

bool refused_as_too_deep(const std::expected<RpcCall, CallError>& call) {
  return !call.has_value() && call.error().error.code == rpc_code::kInvalidRequest &&
         call.error().error.message.find("deeper than 64") != std::string::npos &&
         call.error().id.is_null();
}

// Runs `fn` to completion on a thread with a stack of `bytes`: recursion a
// client controls would overflow it, and crash the test, long before a
// million levels.
void run_with_stack(std::size_t bytes, const std::function<void()>& fn) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, bytes), 0);
  pthread_t thread;
  auto body = [](void* arg) -> void* {
    (*static_cast<const std::function<void()>*>(arg))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attr, body, const_cast<std::function<void()>*>(&fn)), 0);
  ASSERT_EQ(pthread_join(thread, nullptr), 0);
  pthread_attr_destroy(&attr);
}

TEST(ProtocolTest, ParsesARequestAndKeepsItsId) {
  auto call = call_parse(R"({"jsonrpc":"2.0","id":"a1","method":"stats"})");
  ASSERT_TRUE(call.has_value());
  EXPECT_EQ(call->id, "a1");
  EXPECT_TRUE(call->has_id);
  EXPECT_EQ(call->method, "stats");
  EXPECT_TRUE(call->params.empty());
}

TEST(ProtocolTest, NotificationHasNoId) {
  auto call = call_parse(R"({"jsonrpc":"2.0","method":"health"})");
  ASSERT_TRUE(call.has_value());
  EXPECT_FALSE(call->has_id);
}

TEST(ProtocolTest, RefusesMalformedRequestsWithTheirCodes) {
  EXPECT_EQ(call_parse("{").error().error.code, rpc_code::kParseError);
  EXPECT_EQ(call_parse("3").error().error.code, rpc_code::kInvalidRequest);
  EXPECT_EQ(call_parse("[]").error().error.code, rpc_code::kInvalidRequest);
  EXPECT_EQ(call_parse(R"({"id":1,"method":"x"})").error().error.code, rpc_code::kInvalidRequest);
  auto bad_params = call_parse(R"({"jsonrpc":"2.0","id":4,"method":"x","params":3})");
  EXPECT_EQ(bad_params.error().error.code, rpc_code::kInvalidRequest);
  EXPECT_EQ(bad_params.error().id, 4);  // answered under its own id
  EXPECT_TRUE(call_parse(R"({"jsonrpc":"2.0","id":{},"method":"x"})").error().id.is_null());
  // nlohmann::json stops reading at a NUL byte; the request before it must
  // not be taken (found by fuzz/protocol_fuzz).
  using std::string_literals::operator""s;
  EXPECT_EQ(call_parse("{\"jsonrpc\":\"2.0\",\"method\":\"help\"}\0garbage"s).error().error.code,
            rpc_code::kParseError);
}

TEST(ProtocolTest, RefusesDeepDocumentsWhileParsingOnASmallStack) {
  constexpr std::size_t kDeep = 1'000'000;
  const std::vector<std::string> deep = {
      nested_arrays(kDeep),
      nested_objects(kDeep),
      nested_mixed(kDeep),
      request_with_params(nested_arrays(kDeep)),
      request_with_params(nested_objects(kDeep)),
      request_with_params(R"({"prompt":)" + nested_mixed(kDeep) + "}"),
      R"({"jsonrpc":"2.0","id":)" + nested_arrays(kDeep) + R"(,"method":"health"})",
      R"({"jsonrpc":"2.0","id":)" + nested_objects(kDeep) + R"(,"method":"health"})",
      // Never closed: refused at the first level too deep, not read to its end.
      R"({"jsonrpc":"2.0","id":1,"method":"health","params":)" + std::string(kDeep, '['),
  };
  // Brackets inside strings nest nothing.
  const std::string brackets = repeat("[{", kDeep / 2) + R"(\"]})";
  const std::vector<std::string> shallow = {
      R"({"jsonrpc":"2.0","id":1,"method":"generate","params":{"prompt":")" + brackets + R"("}})",
      R"({"jsonrpc":"2.0","id":")" + brackets + R"(","method":"health"})",
      R"({"jsonrpc":"2.0","id":1,"method":")" + brackets + R"("})",
  };
  std::vector<std::expected<RpcCall, CallError>> deep_calls;
  std::vector<std::expected<RpcCall, CallError>> shallow_calls;
  run_with_stack(256 * 1024, [&] {
    for (const std::string& line : deep) deep_calls.push_back(call_parse(line));
    for (const std::string& line : shallow) shallow_calls.push_back(call_parse(line));
  });
  ASSERT_EQ(deep_calls.size(), deep.size());
  for (std::size_t i = 0; i < deep_calls.size(); ++i) {
    EXPECT_TRUE(refused_as_too_deep(deep_calls[i]))
        << "deep case " << i << ": "
        << (deep_calls[i] ? "accepted" : deep_calls[i].error().error.message);
  }
  ASSERT_EQ(shallow_calls.size(), shallow.size());
  for (std::size_t i = 0; i < shallow_calls.size(); ++i) {
    ASSERT_TRUE(shallow_calls[i].has_value())
        << "string case " << i << ": " << shallow_calls[i].error().error.message;
  }
  auto params = generate_params_parse(shallow_calls[0]->params);
  ASSERT_TRUE(params.has_value()) << params.error().message;
  EXPECT_EQ(std::get<std::string>(params->prompt).size(), kDeep + 3);
}

TEST(ProtocolTest, AcceptsARequestAtTheDepthLimitAndRefusesOneLevelMore) {
  static_assert(kMaxJsonDepth == 64);  // the tests' lines and messages say 64
  // The request object is level 1, so params may nest 63 levels.
  for (auto nest : {nested_arrays, nested_objects, nested_mixed}) {
    auto at_limit = call_parse(request_with_params(nest(kMaxJsonDepth - 1)));
    ASSERT_TRUE(at_limit.has_value()) << at_limit.error().error.message;
    EXPECT_EQ(at_limit->id, 7);
    EXPECT_TRUE(refused_as_too_deep(call_parse(request_with_params(nest(kMaxJsonDepth)))));
  }
  // At the top level, the limit comes before "batch requests are not supported".
  auto batch = call_parse(nested_arrays(kMaxJsonDepth));
  ASSERT_FALSE(batch.has_value());
  EXPECT_EQ(batch.error().error.message, "batch requests are not supported");
  EXPECT_TRUE(refused_as_too_deep(call_parse(nested_arrays(kMaxJsonDepth + 1))));
  // Not JSON, and not deep: still a parse error.
  EXPECT_EQ(call_parse(std::string(kMaxJsonDepth, '[')).error().error.code, rpc_code::kParseError);
}

TEST(ProtocolTest, NoParamsMeansAbsentOrAnEmptyObject) {
  EXPECT_TRUE(no_params_check(json::object()).has_value());
  auto absent = call_parse(R"({"jsonrpc":"2.0","id":1,"method":"help"})");
  ASSERT_TRUE(absent.has_value());
  EXPECT_TRUE(no_params_check(absent->params).has_value());
  for (const json& bad : {json::array(), json::array({1}), json{{"verbose", true}}}) {
    auto r = no_params_check(bad);
    ASSERT_FALSE(r.has_value()) << bad.dump();
    EXPECT_EQ(r.error().code, rpc_code::kInvalidParams);
    EXPECT_EQ(r.error().message, "this method takes no parameters: leave out 'params' or send {}");
  }
}

TEST(ProtocolTest, TemperatureAndTopPAreJudgedOnTheNumberSent) {
  auto sampling = [](const char* key, json value) {
    return generate_params_parse({{"prompt", "a"}, {key, std::move(value)}});
  };
  // Out of range as sent, whatever float it would round to; the message
  // quotes the number sent.
  for (const auto& [key, value, got] : std::vector<std::tuple<const char*, double, std::string>>{
           {"temperature", -1e-300, "got -1e-300"},
           {"temperature", -1.0, "got -1"},
           {"temperature", 1e39, "got 1e+39"},
           {"top_p", 0.0, "got 0"},
           {"top_p", -1e-300, "got -1e-300"},
           {"top_p", 1.0000001, "got 1.0000001"},
           {"top_p", 1.5, "got 1.5"}}) {
    auto r = sampling(key, value);
    ASSERT_FALSE(r.has_value()) << key << " " << value;
    EXPECT_EQ(r.error().code, rpc_code::kInvalidParams);
    EXPECT_NE(r.error().message.find(got), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find(key), std::string::npos) << r.error().message;
  }
  // Positive values too small for a float stay positive: a top_p of 1e-300
  // keeps only the most likely token, as its float does.
  auto tiny_p = sampling("top_p", 1e-300);
  ASSERT_TRUE(tiny_p.has_value()) << tiny_p.error().message;
  EXPECT_EQ(tiny_p->sampling.top_p, std::numeric_limits<float>::denorm_min());
  auto tiny_t = sampling("temperature", 1e-300);
  ASSERT_TRUE(tiny_t.has_value()) << tiny_t.error().message;
  EXPECT_EQ(tiny_t->sampling.temperature, std::numeric_limits<float>::denorm_min());
  // -0 is 0 (greedy), without a sign the engine would see.
  auto minus_zero = sampling("temperature", -0.0);
  ASSERT_TRUE(minus_zero.has_value());
  EXPECT_EQ(minus_zero->sampling.temperature, 0.0f);
  EXPECT_FALSE(std::signbit(minus_zero->sampling.temperature));
  // The ends of the ranges, and integers.
  EXPECT_EQ(sampling("top_p", 1)->sampling.top_p, 1.0f);
  EXPECT_EQ(sampling("temperature", 2)->sampling.temperature, 2.0f);
  EXPECT_EQ(sampling("temperature", 0)->sampling.temperature, 0.0f);
  EXPECT_EQ(sampling("temperature", std::numeric_limits<float>::max())->sampling.temperature,
            std::numeric_limits<float>::max());
  EXPECT_FALSE(sampling("temperature", "1").has_value());
}

TEST(ProtocolTest, GenerateParamsAreTypeChecked) {
  auto ok =
      generate_params_parse({{"tokens", {1, 2}}, {"max_tokens", 3}, {"seed", 9}, {"stop", {"\n"}}});
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(std::get<std::vector<int>>(ok->prompt), (std::vector<int>{1, 2}));
  EXPECT_EQ(ok->max_tokens, 3);
  EXPECT_EQ(ok->sampling.seed, 9u);
  for (const json& bad :
       {json{{"prompt", "a"}, {"tokens", {1}}}, json{{"max_tokens", 1}},
        json{{"prompt", "a"}, {"max_tokens", 1.5}}, json{{"prompt", "a"}, {"seed", -1}},
        json{{"prompt", "a"}, {"top_k", 1LL << 40}}, json{{"tokens", {-1}}},
        json{{"prompt", "a"}, {"stop", "x"}}, json::array(),
        // Non-negative JSON integers are unsigned inside nlohmann::json; the
        // minimum must hold for them too (found by fuzz/protocol_fuzz).
        json{{"prompt", "a"}, {"n", 0}}, json{{"prompt", "a"}, {"max_tokens", 0}}}) {
    auto r = generate_params_parse(bad);
    ASSERT_FALSE(r.has_value()) << bad.dump();
    EXPECT_EQ(r.error().code, rpc_code::kInvalidParams);
  }
}

TEST(ProtocolTest, MessagesAreRenderedThroughTheChatTemplateWithItsStops) {
  const json messages = {{{"role", "user"}, {"content", "Hi"}}};
  auto params = generate_params_parse({{"messages", messages}, {"stop", {"X"}}});
  ASSERT_TRUE(params.has_value()) << params.error().message;
  ASSERT_TRUE(generate_messages_render(*params, ChatTemplate{}).has_value());
  EXPECT_EQ(std::get<std::string>(params->prompt), "User: Hi\nAssistant:");
  EXPECT_EQ(params->stop, (std::vector<std::string>{"X", "\nUser:"}));
  for (const json& bad :
       {json{{"messages", messages}, {"prompt", "a"}},
        json{{"tokens", {1}}, {"messages", messages}}, json{{"messages", json::array()}},
        json{{"messages", {{{"role", "tool"}}}}}}) {
    auto r = generate_params_parse(bad);
    ASSERT_FALSE(r.has_value()) << bad.dump();
    EXPECT_EQ(r.error().code, rpc_code::kInvalidParams);
  }
}

TEST(ProtocolTest, LinesAreSingleJsonObjectsEvenWithBrokenUtf8) {
  const std::string line = response_line(1, {{"text", std::string("\xe2\x82", 2)}});
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  EXPECT_FALSE(json::parse(line, nullptr, false).is_discarded());
  const json err = json::parse(error_line(nullptr, {rpc_code::kMethodNotFound, "nope"}));
  EXPECT_EQ(err["error"]["code"], -32601);
  EXPECT_TRUE(err["id"].is_null());
}

}  // namespace
}  // namespace kvtier::wire
