// unit: regressions for the Jinja evaluator under hostile templates (issue 9): integer
// arithmetic that overflowed (INT64_MIN // -1) or ran for 2^63 steps (1 ** huge), float to int
// conversions outside int64, and the step, output and value budgets that stop a template from
// hanging or exhausting memory. Each error names the limit.
#include <string>

#include <gtest/gtest.h>

#include "core/limits.h"
#include "template/jinja_eval.h"
#include "template/jinja_parser.h"

namespace qs::jinja {
namespace {

Result<std::string> render_str(const std::string& source, const RenderLimits& limits = {}) {
  QS_ASSIGN_OR_RETURN(Body body, parse_template(source, LexOptions{}));
  return render(body, Dict{}, limits);
}

std::string error_of(const std::string& source, const RenderLimits& limits = {}) {
  auto out = render_str(source, limits);
  return out.ok() ? "rendered: " + *out : out.status().message();
}

TEST(JinjaHostile, FloorDivisionAndModuloOfInt64MinByMinusOne) {
  EXPECT_NE(error_of("{{ (-9223372036854775807 - 1) // -1 }}").find("integer overflow"),
            std::string::npos);
  EXPECT_EQ(*render_str("{{ (-9223372036854775807 - 1) % -1 }}"), "0");
  EXPECT_EQ(*render_str("{{ 7 // -1 }} {{ -7 % -1 }} {{ -7 // 2 }} {{ -7 % 2 }}"), "-7 0 -4 1");
}

TEST(JinjaHostile, PowerIsLogarithmicAndChecked) {
  // Before: a loop of 2^63 - 1 multiplications that never overflow.
  EXPECT_EQ(*render_str("{{ 1 ** 9223372036854775807 }}"), "1");
  EXPECT_EQ(*render_str("{{ (-1) ** 9223372036854775807 }}"), "-1");
  EXPECT_EQ(*render_str("{{ 0 ** 9223372036854775807 }} {{ 5 ** 0 }}"), "0 1");
  EXPECT_EQ(*render_str("{{ 3 ** 39 }}"), "4052555153018976267");
  EXPECT_EQ(*render_str("{{ (-2) ** 63 }}"), "-9223372036854775808");
  EXPECT_NE(error_of("{{ 3 ** 40 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ 2 ** 63 }}").find("integer overflow"), std::string::npos);
  EXPECT_EQ(*render_str("{{ 2 ** -1 }}"), "0.5");
}

TEST(JinjaHostile, IntFilterOfFloatsOutsideInt64) {
  EXPECT_NE(error_of("{{ 1e300 | int }}").find("does not fit in a 64-bit integer"),
            std::string::npos);
  EXPECT_NE(error_of("{{ (1e300 * 1e300) | int }}").find("inf"), std::string::npos);
  EXPECT_NE(error_of("{{ (-1e300 * 1e300) | int }}").find("does not fit"), std::string::npos);
  EXPECT_EQ(*render_str("{{ -2.7 | int }} {{ True | int }} {{ 9.2e18 | int }}"),
            "-2 1 9200000000000000000");
}

TEST(JinjaHostile, StepBudgetStopsEndlessWork) {
  RenderLimits small;
  small.max_steps = 10000;
  const std::string nested =
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
  EXPECT_NE(error_of(nested, small).find("limit of 10000 evaluation steps"), std::string::npos);
  // The default budget, which ends it too (10^10 iterations otherwise), is the documented
  // limit; rendering it out costs seconds (minutes under the sanitizers) and proves nothing
  // the small budget above does not.
  EXPECT_EQ(RenderLimits{}.max_steps, limits::kMaxTemplateSteps);
}

TEST(JinjaHostile, OutputAndValueBudgets) {
  EXPECT_NE(error_of("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}")
                .find("template output exceeds the limit of 16777216 bytes"),
            std::string::npos);
  // Before: a 1 TiB string.
  EXPECT_NE(error_of("{{ ('x' * 1048576) * 1048576 }}").find("sequence repetition too large"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}"
                     "{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
                .find("exceeds the limit of 16777216"),
            std::string::npos);
  RenderLimits small;
  small.max_output_bytes = 10;
  EXPECT_NE(error_of("{{ 'abcdefghijk' }}", small).find("limit of 10 bytes"), std::string::npos);
  EXPECT_EQ(*render_str("{{ 'abcdefghij' }}", small), "abcdefghij");
}

TEST(JinjaHostile, RecursionLimitIsConfigurable) {
  RenderLimits shallow;
  shallow.max_recursion = 3;
  const std::string count =
      "{% macro c(n) %}{{ n }}{% if n > 0 %}{{ c(n - 1) }}{% endif %}{% endmacro %}{{ c(";
  EXPECT_EQ(*render_str(count + "2) }}", shallow), "210");
  EXPECT_NE(error_of(count + "5) }}", shallow).find("deeper than the limit of 3 calls"),
            std::string::npos);
}

}  // namespace
}  // namespace qs::jinja
