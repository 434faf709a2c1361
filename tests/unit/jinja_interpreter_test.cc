// unit: the Jinja interpreter's contract beyond what the jinja2 goldens cover: every error
// names the template line and the construct (unknown filter/test/tag, unclosed tags,
// unsupported constructs, raise_exception's own message), nothing crashes on malformed
// templates, and the few extensions transformers adds ({% generation %}) behave.
#include <string>

#include <gtest/gtest.h>

#include "template/jinja_eval.h"
#include "template/jinja_parser.h"

namespace qs::jinja {
namespace {

Result<std::string> render_str(const std::string& source, Dict context = {}) {
  QS_ASSIGN_OR_RETURN(Body body, parse_template(source, LexOptions{}));
  return render(body, context);
}

// Expects rendering to fail with a message containing every one of `parts`.
void expect_error(const std::string& source, std::initializer_list<const char*> parts,
                  Dict context = {}) {
  SCOPED_TRACE(source);
  auto out = render_str(source, std::move(context));
  ASSERT_FALSE(out.ok()) << "rendered: " << *out;
  for (const char* part : parts) {
    EXPECT_NE(out.status().message().find(part), std::string::npos)
        << "'" << part << "' not in: " << out.status().message();
  }
}

TEST(JinjaErrors, UnknownFilterNamesFilterAndLine) {
  expect_error("a\nb\n{{ 'x' | frobnicate }}", {"template line 3", "unknown filter 'frobnicate'"});
  EXPECT_EQ(render_str("{{ 1 | frob }}").status().code(), StatusCode::kUnimplemented);
}

TEST(JinjaErrors, UnknownTestAndMethod) {
  expect_error("{{ 1 is frob }}", {"template line 1", "unknown test 'frob'"});
  expect_error("\n{{ 'a'.zfill(3) }}", {"template line 2", "str.zfill()"});
}

TEST(JinjaErrors, UnclosedTags) {
  expect_error("{% if true %}\nabc", {"'if' opened at line 1 is never closed"});
  expect_error("{% for x in [1] %}{% if x %}{% endfor %}", {"unexpected 'endfor'"});
  expect_error("x\n{{ 1 + ", {"template line 2", "unclosed tag", "}}"});
  expect_error("{% if true ", {"unclosed tag", "%}"});
  expect_error("{# never closed", {"missing end of comment tag"});
  expect_error("{{ 'abc }}", {"unterminated string literal"});
  expect_error("{{ (1 + 2 }}", {"unexpected '}', expected ')'"});  // jinja2's wording
  expect_error("{{ 1 ] }}", {"unexpected ']'"});
}

TEST(JinjaErrors, StrayTags) {
  expect_error("{% endif %}", {"unexpected 'endif'"});
  expect_error("{% else %}", {"unexpected 'else'"});
  expect_error("{% break %}", {"'break' outside a for loop"});
  expect_error("{% for x in [1] %}{% macro m() %}{% break %}{% endmacro %}{% endfor %}",
               {"'break' outside a for loop"});
  expect_error("{% frobnicate %}", {"unknown tag 'frobnicate'"});
}

TEST(JinjaErrors, UnsupportedConstructsAreNamed) {
  expect_error("{% include 'other.jinja' %}", {"unsupported construct", "include"});
  expect_error("{% raw %}{{ x }}{% endraw %}", {"unsupported construct", "raw"});
  expect_error("{% for x in [1] recursive %}{% endfor %}", {"recursive"});
  expect_error("{% call m() %}{% endcall %}", {"unsupported construct", "call"});
  expect_error("{{ '%s' % 'x' }}", {"printf-style"});
  expect_error("{{ '{:>4}'.format(1) }}", {"str.format field"});
  expect_error("{{ f(*args) }}", {"*args"});
}

TEST(JinjaErrors, RaiseExceptionMessageSurfaces) {
  expect_error(
      "{% for m in [1, 2] %}\n{% if m == 2 %}{{ raise_exception('Only one message!') }}"
      "{% endif %}{% endfor %}",
      {"template line 2", "raise_exception: Only one message!"});
}

TEST(JinjaErrors, UndefinedUsedStrictly) {
  expect_error("{{ message.content }}", {"'message' is undefined"});
  expect_error("{{ d.a.b }}", {"'dict object' has no attribute 'a'"}, [] {
    Dict c;
    c.set("d", Value(Dict{}));
    return c;
  }());
  expect_error("{{ x + 1 }}", {"'x' is undefined"});
  // ...but printing, testing, iterating and defaulting an undefined value are fine.
  auto out = render_str(
      "[{{ x }}]{{ x is defined }}{% for i in x %}{{ i }}{% endfor %}{{ x|default('d') }}");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, "[]Falsed");
}

TEST(JinjaErrors, SandboxRejectsMutation) {
  Dict ctx;
  ctx.set("xs", Value(std::vector<Value>{Value(1)}));
  expect_error("{{ xs.append(2) }}", {"unsafe method list.append()"}, ctx);
  expect_error("{% set xs.y = 1 %}", {"only namespace() objects"}, ctx);
}

TEST(JinjaErrors, ArithmeticErrorsAreReportedNotUndefinedBehaviour) {
  expect_error("{{ 9223372036854775807 + 1 }}", {"integer overflow"});
  expect_error("{{ 2 ** 64 }}", {"integer overflow"});
  expect_error("{{ 1 // 0 }}", {"division or modulo by zero"});
  expect_error("{{ 99999999999999999999 }}", {"out of range"});
  expect_error("{{ range(1000000) | length }}", {"range() too big"});
}

TEST(JinjaErrors, DeepNestingAndRecursionAreErrorsNotStackOverflows) {
  expect_error("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}",
               {"nested too deeply"});
  expect_error("{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}",
               {"nested too deeply"});
  expect_error("{{ " + std::string(100000, '-') + "1 }}", {"nested too deeply"});
  std::string nots = "{{ ";
  for (int i = 0; i < 50000; ++i) nots += "not ";
  expect_error(nots + "1 }}", {"nested too deeply"});
  std::string ifs;
  for (int i = 0; i < 10000; ++i) ifs += "{% if true %}";
  expect_error(ifs, {"nested too deeply"});
  expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", {"macro 'f' recursion"});
  // Bounded recursion is fine.
  auto out = render_str(
      "{% macro count(n) %}{{ n }}{% if n > 0 %}{{ count(n - 1) }}{% endif %}{% endmacro %}"
      "{{ count(5) }}");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, "543210");
}

TEST(JinjaErrors, MalformedTemplatesNeverCrash) {
  // Every prefix of a template that uses most of the grammar: each must parse and render or
  // return an error, never crash or hang.
  const std::string full =
      "{%- set ns = namespace(a=[1, {'k': (2, 3)}]) -%}\n"
      "{% macro m(x, y='z') %}{{ x ~ y | upper }}{% endmacro %}\n"
      "{% for i in ns.a if i is not none %}{{ loop.index }}{{ m(i) }}{% else %}e{% endfor %}\n"
      "{{ 'a' if ns.a[1:][::-1] else \"b\" }}{# c #}{{ -1 ** 2 // 3 % 4 }}";
  for (size_t n = 0; n <= full.size(); ++n) {
    auto out = render_str(full.substr(0, n));
    if (!out.ok()) {
      EXPECT_FALSE(out.status().message().empty());
    }
  }
  auto out = render_str(full);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
}

TEST(JinjaExtensions, GenerationBlockRendersItsBody) {
  // transformers registers {% generation %} (AssistantTracker) to mark assistant spans.
  auto out = render_str("a{% generation %}b{{ 1 }}{% endgeneration %}c");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, "ab1c");
}

TEST(JinjaExtensions, StrftimeNowFormatsTheClock) {
  auto out = render_str("{{ strftime_now('%Y') | length }} {{ strftime_now is defined }}");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, "4 True");
}

TEST(JinjaValues, FloatReprMatchesPython) {
  EXPECT_EQ(format_float(1.0), "1.0");
  EXPECT_EQ(format_float(0.1), "0.1");
  EXPECT_EQ(format_float(-0.0), "-0.0");
  EXPECT_EQ(format_float(1e16), "1e+16");
  EXPECT_EQ(format_float(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(format_float(0.0001), "0.0001");
  EXPECT_EQ(format_float(0.00001), "1e-05");
  EXPECT_EQ(format_float(1.5e-300), "1.5e-300");
  EXPECT_EQ(format_float(123.456), "123.456");
}

TEST(JinjaValues, JsonMatchesPythonJsonDumps) {
  Dict d;
  d.set("z", Value("é\x1f\"\\/\n"));
  d.set("a", Value(std::vector<Value>{Value(1), Value(2.0), Value(None{}), Value(true)}));
  auto one_line = to_json(Value(d), -1, false, ", ", ": ");
  ASSERT_TRUE(one_line.ok());
  EXPECT_EQ(*one_line, "{\"z\": \"é\\u001f\\\"\\\\/\\n\", \"a\": [1, 2.0, null, true]}");
  auto sorted = to_json(Value(d), 2, true, ",", ": ");
  ASSERT_TRUE(sorted.ok());
  EXPECT_EQ(*sorted,
            "{\n  \"a\": [\n    1,\n    2.0,\n    null,\n    true\n  ],\n  \"z\": "
            "\"é\\u001f\\\"\\\\/\\n\"\n}");
  EXPECT_FALSE(to_json(Value::undefined("u"), -1, false, ", ", ": ").ok());
}

TEST(JinjaValues, ReprOfStringsPicksPythonQuotes) {
  EXPECT_EQ(Value("it's").repr(), "\"it's\"");
  EXPECT_EQ(Value("a'b\"c").repr(), "'a\\'b\"c'");
  EXPECT_EQ(Value("tab\there\x01").repr(), "'tab\\there\\x01'");
}

}  // namespace
}  // namespace qs::jinja
