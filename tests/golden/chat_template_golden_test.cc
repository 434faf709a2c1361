// golden: every model chat template in tests/golden/fixtures/chat_templates rendered over the
// conversations of goldens.json must equal, byte for byte, what jinja2 configured as
// transformers' apply_chat_template produced (scripts/gen_chat_template_goldens.py); where
// jinja2 raised (raise_exception in the template), we must fail with the same message.
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"

namespace qs::tok {
namespace {

const std::string kFixtures = std::string(QS_SOURCE_DIR) + "/tests/golden/fixtures/chat_templates/";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<std::string> optional_string(const nlohmann::ordered_json& j) {
  if (j.is_null()) return std::nullopt;
  return j.get<std::string>();
}

TEST(ChatTemplateGolden, MatchesJinja2ByteForByte) {
  auto goldens = nlohmann::ordered_json::parse(read_text(kFixtures + "goldens.json"));
  ASSERT_GE(goldens["cases"].size(), 40u);
  int n_rendered = 0, n_errors = 0;
  for (const auto& c : goldens["cases"]) {
    const std::string file = c["template"].get<std::string>();
    SCOPED_TRACE(file + " / " + c["name"].get<std::string>());
    std::string source = read_text(kFixtures + file);
    ASSERT_FALSE(source.empty()) << "missing fixture " << file;
    auto tmpl = ChatTemplate::from_string(source, optional_string(c["bos_token"]),
                                          optional_string(c["eos_token"]));
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
    auto out =
        tmpl->render(c["messages"], c["add_generation_prompt"].get<bool>(), c["extra_context"]);
    if (c.contains("expected_error")) {
      ASSERT_FALSE(out.ok()) << "rendered instead of failing:\n" << *out;
      EXPECT_NE(out.status().message().find(c["expected_error"].get<std::string>()),
                std::string::npos)
          << out.status().to_string();
      ++n_errors;
    } else {
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      EXPECT_EQ(*out, c["expected"].get<std::string>());
      ++n_rendered;
    }
  }
  EXPECT_GT(n_rendered, 0);
  EXPECT_GT(n_errors, 0);
}

}  // namespace
}  // namespace qs::tok
