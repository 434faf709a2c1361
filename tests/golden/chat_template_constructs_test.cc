// golden: one small template per Jinja construct (whitespace control, literals, operators,
// loops, macros, filters, tests, methods), each rendered by jinja2 with transformers'
// settings into jinja_cases.json. Output must match byte for byte; where jinja2 raised, the
// interpreter must return an error rather than print anything.
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "template/jinja_eval.h"
#include "template/jinja_parser.h"

namespace qs::jinja {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<std::string> render_case(const std::string& source, const nlohmann::ordered_json& context) {
  QS_ASSIGN_OR_RETURN(Body body, parse_template(source, LexOptions{}));
  Dict ctx;
  for (const auto& [k, v] : context.items()) ctx.set(k, Value::from_json(v));
  return render(body, ctx);
}

TEST(JinjaConstructsGolden, MatchJinja2) {
  auto cases = nlohmann::ordered_json::parse(read_text(
      std::string(QS_SOURCE_DIR) + "/tests/golden/fixtures/chat_templates/jinja_cases.json"));
  ASSERT_GE(cases["cases"].size(), 80u);
  for (const auto& c : cases["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>() + ": " + c["template"].get<std::string>());
    auto out = render_case(c["template"].get<std::string>(), c["context"]);
    if (c.contains("expected_error")) {
      EXPECT_FALSE(out.ok()) << "jinja2 raised " << c["expected_error"]
                             << " but we rendered: " << *out;
      if (!out.ok()) {
        EXPECT_EQ(out.status().message().rfind("template line ", 0), 0u)
            << out.status().to_string();
      }
    } else {
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      EXPECT_EQ(*out, c["expected"].get<std::string>());
    }
  }
}

}  // namespace
}  // namespace qs::jinja
