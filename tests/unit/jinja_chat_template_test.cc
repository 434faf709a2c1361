// unit: ChatTemplate loading from a checkpoint directory (chat_template string, named list,
// chat_template.jinja, bos/eos as strings or {"content"} objects) and the render context
// transformers builds (tools/documents None by default, extra kwargs override).
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../common/shared_data.h"
#include "tokenizer/chat_template.h"

namespace qs::tok {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

class TempDir {
 public:
  TempDir() {
    path_ =
        fs::temp_directory_path() /
        ("qs_chat_template_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

const ojson kUser = ojson::parse(R"([{"role": "user", "content": "hi"}])");

TEST(ChatTemplate, FromConfigStringWithAddedTokenObjects) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({
    "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
    "eos_token": "</s>",
    "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}{% endfor %}"
  })");
  auto t = ChatTemplate::from_model_dir(dir.str());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->bos_token(), "<s>");
  auto out = t->render(kUser, false);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, "<s>[user]hi</s>");
}

TEST(ChatTemplate, NamedListUsesDefault) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": [
    {"name": "tool_use", "template": "TOOLS"},
    {"name": "default", "template": "DEFAULT {{ messages|length }}"}]})");
  auto t = ChatTemplate::from_model_dir(dir.str());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(*t->render(kUser, false), "DEFAULT 1");
}

TEST(ChatTemplate, NamedListWithoutDefaultIsAnError) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": [{"name": "rag", "template": "x"}]})");
  auto t = ChatTemplate::from_model_dir(dir.str());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("has: rag"), std::string::npos) << t.status().message();
}

TEST(ChatTemplate, ChatTemplateJinjaFileWins) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"eos_token": "<e>", "chat_template": "FROM CONFIG"})");
  dir.write("chat_template.jinja", "FROM FILE {{ eos_token }}\n");
  auto t = ChatTemplate::from_model_dir(dir.str());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(*t->render(kUser, false), "FROM FILE <e>");  // jinja2 drops one trailing newline
}

TEST(ChatTemplate, MissingOrBrokenInputsAreErrors) {
  TempDir dir;
  auto none = ChatTemplate::from_model_dir(dir.str());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);

  dir.write("tokenizer_config.json", "{not json");
  EXPECT_EQ(ChatTemplate::from_model_dir(dir.str()).status().code(), StatusCode::kDataLoss);

  dir.write("tokenizer_config.json", R"({"chat_template": 7})");
  EXPECT_EQ(ChatTemplate::from_model_dir(dir.str()).status().code(), StatusCode::kDataLoss);

  dir.write("tokenizer_config.json", R"({"chat_template": "{% if x %}", "bos_token": 3})");
  EXPECT_FALSE(ChatTemplate::from_model_dir(dir.str()).ok());

  dir.write("tokenizer_config.json", R"({"chat_template": "{% if x %}"})");
  auto syntax = ChatTemplate::from_model_dir(dir.str());
  ASSERT_FALSE(syntax.ok());
  EXPECT_NE(syntax.status().message().find("never closed"), std::string::npos);
}

TEST(ChatTemplate, ContextMatchesApplyChatTemplate) {
  // tools and documents are always passed (as None when absent), so `is defined` holds.
  auto t = ChatTemplate::from_string(
      "{{ tools is defined }} {{ tools is none }} {{ documents is none }} "
      "{{ add_generation_prompt }} {{ bos_token is defined }} {{ enable_thinking }}");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(*t->render(kUser, true, ojson{{"enable_thinking", false}}),
            "True True True True False False");
  auto with_tools = ChatTemplate::from_string("{{ tools | map(attribute='name') | join(',') }}");
  ASSERT_TRUE(with_tools.ok());
  EXPECT_EQ(*with_tools->render(kUser, false,
                                ojson::parse(R"({"tools": [{"name": "a"}, {"name": "b"}]})")),
            "a,b");
}

TEST(ChatTemplate, KeyOrderOfInputIsKeptForToJson) {
  auto t = ChatTemplate::from_string("{{ messages[0] | tojson }}");
  ASSERT_TRUE(t.ok());
  auto ordered = ojson::parse(R"([{"role": "user", "content": "x", "a": 1}])");
  EXPECT_EQ(*t->render(ordered, false), R"({"role": "user", "content": "x", "a": 1})");
  // A plain nlohmann::json converts implicitly; its keys arrive sorted.
  nlohmann::json sorted = nlohmann::json::parse(R"([{"role": "user", "content": "x"}])");
  EXPECT_EQ(*t->render(sorted, false), R"({"content": "x", "role": "user"})");
}

TEST(ChatTemplate, BadArgumentsAreErrors) {
  auto t = ChatTemplate::from_string("x");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->render(ojson::object(), false).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t->render(kUser, false, ojson::array()).status().code(), StatusCode::kInvalidArgument);
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  ojson deep_messages = ojson::array({{{"role", "user"}, {"content", ojson::parse(deep)}}});
  EXPECT_EQ(t->render(deep_messages, false).status().code(), StatusCode::kInvalidArgument);
  auto raising =
      ChatTemplate::from_string("{{ raise_exception('Conversation roles must alternate') }}");
  ASSERT_TRUE(raising.ok());
  auto out = raising->render(kUser, false);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("Conversation roles must alternate"), std::string::npos);
}

TEST(ChatTemplate, SharedQwenCheckpointLoadsItsQwen3Template) {
  QS_SKIP_WITHOUT_SHARED_DATA("tokenizers/qwen2/tokenizer_config.json");
  const std::string dir = ::qs::testing::shared_data_dir() + "/tokenizers/qwen2";
  auto t = ChatTemplate::from_model_dir(dir);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_FALSE(t->bos_token().has_value());  // "bos_token": null
  EXPECT_EQ(t->eos_token(), "<|im_end|>");
  auto out = t->render(kUser, true, ojson{{"enable_thinking", false}});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

}  // namespace
}  // namespace qs::tok
