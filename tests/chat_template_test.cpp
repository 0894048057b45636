// The chat template (daemon/http/chat_template.h): the default, a model
// folder's own file, and every way such a file can be wrong, each an error
// naming the file and the key.
#include "daemon/http/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "test_util.h"

namespace kvtier::daemon::http {
namespace {

TEST(ChatTemplateTest, AFolderWithoutAFileGetsTheDefault) {
  test_util::TempDir dir;
  auto t = ChatTemplate::load(dir.path().string());
  ASSERT_TRUE(t.has_value()) << t.error();
  EXPECT_EQ(t->render({{"system", "S"}, {"user", "U"}, {"assistant", "A"}}),
            "S\n\nUser: U\nAssistant: A\nAssistant:");
  EXPECT_EQ(t->stop, (std::vector<std::string>{"\nUser:"}));
}

TEST(ChatTemplateTest, TheBundledModelSpeaksQAndA) {
  auto t = ChatTemplate::load(std::string(KVTIER_SOURCE_DIR) + "/models/fortunes-char");
  ASSERT_TRUE(t.has_value()) << t.error();
  EXPECT_EQ(t->render({{"user", "Why?"}}), "Q: Why?\nA:");
}

TEST(ChatTemplateTest, AWrongFileIsAnErrorNamingItAndTheKey) {
  test_util::TempDir dir;
  const auto with = [&](const std::string& text) {
    std::ofstream(dir.path() / "chat_template.json") << text;
    return ChatTemplate::load(dir.path().string());
  };
  auto custom = with(R"({"user": "<u>{content}</u>", "generation_prompt": "<a>", "stop": []})");
  ASSERT_TRUE(custom.has_value()) << custom.error();
  EXPECT_EQ(custom->render({{"user", "hi"}}), "<u>hi</u><a>");
  EXPECT_TRUE(custom->stop.empty());
  for (const auto& [text, key] :
       std::vector<std::pair<std::string, std::string>>{{"{not json", "parse error"},
                                                        {"[]", "not a JSON object"},
                                                        {R"({"user": "no placeholder"})", "'user'"},
                                                        {R"({"user": 5})", "'user'"},
                                                        {R"({"stop": "x"})", "'stop'"},
                                                        {R"({"stop": [1]})", "'stop'"},
                                                        {R"({"bos": "x"})", "'bos'"}}) {
    auto t = with(text);
    ASSERT_FALSE(t.has_value()) << text;
    EXPECT_TRUE(test_util::contains(t.error(), "chat_template.json")) << t.error();
    EXPECT_TRUE(test_util::contains(t.error(), key)) << t.error();
  }
  std::filesystem::remove(dir.path() / "chat_template.json");
  std::filesystem::create_directory(dir.path() / "chat_template.json");
  EXPECT_FALSE(ChatTemplate::load(dir.path().string()).has_value());
}

}  // namespace
}  // namespace kvtier::daemon::http
