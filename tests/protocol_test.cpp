#include "daemon/protocol.h"

#include <gtest/gtest.h>

namespace kvtier::daemon {
namespace {

using nlohmann::json;

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
}  // namespace kvtier::daemon
