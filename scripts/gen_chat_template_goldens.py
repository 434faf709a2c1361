#!/usr/bin/env python3
"""Writes the chat-template goldens for tests/golden/chat_template_*_test.cc.

Renders with the real jinja2 (pinned in scripts/requirements-goldens-jinja.txt), set up the
way transformers' apply_chat_template sets it up (transformers/utils/chat_template_utils.py):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
extension, HF's own `tojson` (json.dumps, ensure_ascii=False), `raise_exception` and
`strftime_now`, and render(messages=..., tools=..., documents=None, add_generation_prompt=...,
bos_token/eos_token, **extra kwargs).

Outputs, in tests/golden/fixtures/chat_templates/:
  goldens.json      - real model templates x conversations -> expected prompt (or error)
  jinja_cases.json  - small templates exercising one construct each -> expected output (or
                      that jinja2 raised)

Usage:
  python3 -m venv .venv-goldens
  .venv-goldens/bin/pip install -r scripts/requirements-goldens-jinja.txt
  .venv-goldens/bin/python scripts/gen_chat_template_goldens.py
"""
import json
import os
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "golden", "fixtures", "chat_templates")


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = make_env()

# ---------------------------------------------------------------------------------------------
# Conversations

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a time zone",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": []},
    },
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER1 = {"role": "user", "content": "Hello! What can you do?"}
ASSIST1 = {"role": "assistant", "content": "I can answer questions, write code and more."}
USER2 = {"role": "user", "content": "Write a haiku about the sea.\nKeep it short."}

CONVERSATIONS = {
    "system_user": [SYSTEM, USER1],
    "user_only": [USER1],
    "multi_turn": [SYSTEM, USER1, ASSIST1, USER2],
    "ends_with_assistant": [SYSTEM, USER1, ASSIST1],
    "empty_system": [{"role": "system", "content": ""}, USER1],
    "padded_content": [{"role": "system", "content": "  Be brief.  \n"},
                       {"role": "user", "content": "\n  Why is the sky blue?  \n\n"}],
    "unicode_and_quotes": [{"role": "user", "content": "Ünïcödé ✓ 你好 🙂 \"quoted\" 'single' \\ back\ttab"},
                           {"role": "assistant", "content": "Got it: «ok» — done."},
                           {"role": "user", "content": "{{ not a template }} {% neither %}"}],
    "tool_call": [SYSTEM,
                  {"role": "user", "content": "What's the weather in Paris?"},
                  {"role": "assistant", "content": "",
                   "tool_calls": [{"type": "function", "function": {
                       "name": "get_current_weather",
                       "arguments": {"location": "Paris, France", "unit": "celsius"}}}]},
                  {"role": "tool", "content": "{\"temperature\": 22, \"sky\": \"clear\"}"},
                  {"role": "assistant", "content": "It is 22 °C and clear in Paris."},
                  {"role": "user", "content": "Thanks!"}],
    "two_tool_calls": [{"role": "user", "content": "Weather in Paris and the time in Tokyo?"},
                       {"role": "assistant", "content": "Let me check both.",
                        "tool_calls": [
                            {"type": "function", "function": {"name": "get_current_weather",
                                                              "arguments": {"location": "Paris"}}},
                            {"type": "function", "function": {"name": "get_time",
                                                              "arguments": "{\"tz\": \"Asia/Tokyo\"}"}}]},
                       {"role": "tool", "content": "sunny"},
                       {"role": "tool", "content": "14:05"}],
    "think_history": [{"role": "user", "content": "What is 2+2?"},
                      {"role": "assistant", "content": "<think>\nSimple arithmetic.\n</think>\n\n2+2 = 4."},
                      {"role": "user", "content": "And 3+3?"}],
    "think_last_assistant": [{"role": "user", "content": "What is 2+2?"},
                             {"role": "assistant",
                              "content": "<think>\nAdd them.\n</think>\n\nIt is 4."}],
    "reasoning_field": [{"role": "user", "content": "Pick a colour."},
                        {"role": "assistant", "content": "Blue.",
                         "reasoning_content": "The user wants any colour."},
                        {"role": "user", "content": "Why?"}],
    "tool_response_in_user": [{"role": "user", "content": "Hi"},
                              {"role": "assistant", "content": "",
                               "tool_calls": [{"function": {"name": "get_time", "arguments": {"tz": "UTC"}}}]},
                              {"role": "tool", "content": "12:00"},
                              {"role": "user", "content": "<tool_response>\nlate\n</tool_response>"}],
    "ipython_dict_content": [{"role": "user", "content": "Call it"},
                             {"role": "assistant", "tool_calls": [{"type": "function", "function": {
                                 "name": "get_time", "arguments": {"tz": "UTC"}}}]},
                             {"role": "ipython", "content": {"time": "12:00", "ok": True, "n": 1.5}}],
}

# (conversation, add_generation_prompt values, extra kwargs)
QWEN25_CASES = [
    ("system_user", [True, False], {}),
    ("user_only", [True], {}),
    ("multi_turn", [True, False], {}),
    ("ends_with_assistant", [False], {}),
    ("empty_system", [True], {}),
    ("unicode_and_quotes", [True], {}),
    ("tool_call", [True], {"tools": [WEATHER_TOOL]}),
    ("two_tool_calls", [True], {"tools": [WEATHER_TOOL, TIME_TOOL]}),
    ("system_user", [True], {"tools": [WEATHER_TOOL]}),
    ("user_only", [True], {"tools": [TIME_TOOL]}),
]
QWEN3_CASES = [
    ("system_user", [True, False], {}),
    ("user_only", [True], {}),
    ("user_only", [True], {"enable_thinking": False}),
    ("user_only", [True], {"enable_thinking": True}),
    ("multi_turn", [True, False], {"enable_thinking": False}),
    ("ends_with_assistant", [False], {}),
    ("empty_system", [True], {}),
    ("unicode_and_quotes", [True], {}),
    ("think_history", [True], {}),
    ("think_history", [True], {"enable_thinking": False}),
    ("think_last_assistant", [False], {}),
    ("think_last_assistant", [True], {"enable_thinking": True}),
    ("reasoning_field", [True], {}),
    ("tool_call", [True], {"tools": [WEATHER_TOOL]}),
    ("two_tool_calls", [True, False], {"tools": [WEATHER_TOOL, TIME_TOOL]}),
    ("tool_response_in_user", [True], {}),
    ("system_user", [True], {"tools": [WEATHER_TOOL, TIME_TOOL]}),
]
LLAMA3_CASES = [
    ("system_user", [True, False], {}),
    ("user_only", [True], {}),
    ("multi_turn", [True, False], {}),
    ("ends_with_assistant", [False], {}),
    ("empty_system", [True], {}),
    ("padded_content", [True], {}),
    ("unicode_and_quotes", [True], {}),
]
LLAMA32_CASES = [
    ("system_user", [True, False], {"date_string": "26 Jul 2024"}),
    ("user_only", [True], {"date_string": "01 Jan 2025"}),
    ("multi_turn", [True, False], {"date_string": "26 Jul 2024"}),
    ("padded_content", [True], {"date_string": "26 Jul 2024"}),
    ("unicode_and_quotes", [True], {"date_string": "26 Jul 2024"}),
    ("tool_call", [True], {"tools": [WEATHER_TOOL], "date_string": "26 Jul 2024"}),
    ("tool_call", [True], {"tools": [WEATHER_TOOL, TIME_TOOL], "date_string": "26 Jul 2024",
                           "tools_in_user_message": False}),
    ("ipython_dict_content", [True], {"tools": [TIME_TOOL], "date_string": "26 Jul 2024"}),
    # The template refuses two tool calls in one message with raise_exception.
    ("two_tool_calls", [True], {"tools": [WEATHER_TOOL, TIME_TOOL], "date_string": "26 Jul 2024"}),
    # Tools in the first user message, but there is no message left: raise_exception again.
    ("empty_after_system", [True], {"tools": [TIME_TOOL], "date_string": "26 Jul 2024"}),
]
CONVERSATIONS["empty_after_system"] = [SYSTEM]

TEMPLATES = [
    # file, bos_token, eos_token, cases (bos/eos as in each model's tokenizer_config.json)
    ("qwen2.5-7b-instruct.jinja", None, "<|im_end|>", QWEN25_CASES),
    ("qwen3.jinja", None, "<|im_end|>", QWEN3_CASES),
    ("llama3-8b-instruct.jinja", "<|begin_of_text|>", "<|eot_id|>", LLAMA3_CASES),
    ("llama3.2-3b-instruct.jinja", "<|begin_of_text|>", "<|eot_id|>", LLAMA32_CASES),
]


def render_chat(template, bos, eos, messages, add_generation_prompt, extra):
    kwargs = {}
    if bos is not None:
        kwargs["bos_token"] = bos
    if eos is not None:
        kwargs["eos_token"] = eos
    kwargs.update({k: v for k, v in extra.items() if k != "tools"})
    return template.render(messages=messages, tools=extra.get("tools"), documents=None,
                           add_generation_prompt=add_generation_prompt, **kwargs)


def model_goldens():
    cases = []
    for file, bos, eos, plan in TEMPLATES:
        with open(os.path.join(FIXTURES, file), encoding="utf-8") as f:
            template = ENV.from_string(f.read())
        for conv, gen_values, extra in plan:
            for gen in gen_values:
                case = {
                    "template": file,
                    "name": f"{conv}{'_gen' if gen else ''}"
                            + "".join(f"_{k}={v if not isinstance(v, list) else len(v)}"
                                      for k, v in extra.items()),
                    "bos_token": bos,
                    "eos_token": eos,
                    "messages": CONVERSATIONS[conv],
                    "add_generation_prompt": gen,
                    "extra_context": extra,
                }
                try:
                    case["expected"] = render_chat(template, bos, eos, CONVERSATIONS[conv], gen, extra)
                except jinja2.exceptions.TemplateError as e:
                    case["expected_error"] = str(e)
                cases.append(case)
    return cases


# ---------------------------------------------------------------------------------------------
# One construct per case: (name, template, context)

CTX = {"items": [3, 1, 2], "words": ["b", "A", "c", "a"], "d": {"b": 2, "a": 1, "c": None},
       "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
                {"role": "user", "content": "bye", "extra": True}],
       "s": "  Hello, World  ", "n": 7, "f": 2.5, "t": True, "nothing": None, "empty": [],
       "text": "line one\nline two\n\nline four"}

JINJA_CASES = [
    # whitespace control with trim_blocks + lstrip_blocks
    ("ws_trim_newline_after_block", "{% if t %}\nyes\n{% endif %}\nend", {}),
    ("ws_lstrip_indented_block", "a\n    {% if t %}\n    b\n    {% endif %}\nc", {}),
    ("ws_no_lstrip_for_var", "a\n    {{ n }}\nc", {}),
    ("ws_minus_both", "a  \n  {%- if t -%}  \n  b  \n  {%- endif -%}  \n  c", {}),
    ("ws_var_minus", "x   {{- n -}}   y", {}),
    ("ws_plus_disables_lstrip", "a\n    {%+ if t %}b{% endif %}", {}),
    ("ws_plus_disables_trim", "{% if t +%}\nb{% endif %}", {}),
    ("ws_inline_tag_after_text", "a {% if t %}b{% endif %} c", {}),
    ("ws_comment_lstrip_trim", "a\n  {# note #}\nb", {}),
    ("ws_comment_minus", "a  {#- note -#}  b", {}),
    ("ws_trailing_newline_dropped", "x\n", {}),
    ("ws_two_trailing_newlines", "x\n\n", {}),
    ("ws_crlf", "a\r\n{% if t %}\r\nb\r\n{% endif %}\r\n", {}),
    ("ws_tag_after_var_same_line", "{{ n }}  {% if t %}x{% endif %}", {}),
    ("ws_tag_after_block_same_line", "{% if t %}  {% if t %}x{% endif %}{% endif %}", {}),
    ("ws_for_lines", "{% for i in items %}\n  - {{ i }}\n{% endfor %}\n", {}),
    # literals and printing
    ("print_scalars", "{{ 1 }}|{{ 1.0 }}|{{ 1.5e3 }}|{{ 0.1 + 0.2 }}|{{ 1e-7 }}|{{ 1e16 }}|{{ true }}|{{ none }}|{{ 'x' }}", {}),
    ("print_containers", "{{ [1, 'a', none, true, 2.0] }} {{ {'k': 'v', 'n': [1]} }} {{ d }}", {}),
    ("print_str_repr_quotes", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'nl\\n'] }}", {}),
    ("string_escapes", "{{ 'a\\tb\\\\c\\'d\\u00e9\\x41\\n' }}", {}),
    ("string_concat_adjacent", "{{ 'a' 'b' \"c\" }}", {}),
    ("undefined_prints_empty", "[{{ missing }}][{{ d.missing }}][{{ msgs[10] }}]", {}),
    # operators
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 * 3 + 1 }} {{ 1 - 2 - 3 }}", {}),
    ("arith_float", "{{ 7.5 // 2 }} {{ f * 2 }} {{ n + f }} {{ -f }} {{ 10 / 4 }}", {}),
    ("concat_tilde", "{{ 'a' ~ 1 ~ none ~ missing ~ true }}", {}),
    ("string_plus_mul", "{{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ [1] + [2, 3] }} {{ [0] * 3 }}", {}),
    ("compare", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'a' }} {{ [1, 2] == [1, 2] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}", {}),
    ("in_not_in", "{{ 'ell' in 'hello' }} {{ 2 in items }} {{ 'a' in d }} {{ 'z' not in d }} {{ 'x' in missing }}", {}),
    ("and_or_values", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ none or [] }} {{ '' and 1 }} {{ not 0 }} {{ not not 'x' }}", {}),
    ("cond_expr", "{{ 'y' if t else 'n' }} {{ 'y' if nothing else 'n' }} [{{ 'y' if nothing }}] {{ 1 if false else 2 if true else 3 }}", {}),
    ("precedence", "{{ 2 + 3 * 4 }} {{ (2 + 3) * 4 }} {{ -2 ** 2 }} {{ items|length - 1 }} {{ not 1 == 2 }} {{ 'a' ~ 2 * 3 }}", {}),
    ("error_concat_binds_tighter_than_plus", "{{ 1 + 2 ~ 3 }}", {}),
    # subscripts and slices
    ("subscripts", "{{ items[0] }} {{ items[-1] }} {{ msgs[1].role }} {{ msgs[1]['content'] }} {{ d['a'] }} {{ 'hello'[1] }} {{ items.0 }}", {}),
    ("slices", "{{ items[1:] }} {{ items[:-1] }} {{ items[::-1] }} {{ items[::2] }} {{ 'hello'[1:3] }} {{ 'héllo'[::-1] }} {{ items[5:] }} {{ items[-10:2] }}", {}),
    ("attr_of_none_is_undefined", "[{{ nothing.x }}] {{ nothing.x is defined }}", {}),
    # statements
    ("if_elif_else", "{% for v in [1, 2, 3] %}{% if v == 1 %}one{% elif v == 2 %}two{% else %}many{% endif %},{% endfor %}", {}),
    ("for_loop_vars", "{% for m in msgs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }};{% endfor %}", {}),
    ("for_else", "{% for x in empty %}{{ x }}{% else %}none{% endfor %}|{% for x in missing %}{{ x }}{% else %}undef{% endfor %}", {}),
    ("for_if_filter", "{% for m in msgs if m.role == 'user' %}{{ loop.index }}:{{ m.content }}{{ ',' if not loop.last }}{% endfor %}", {}),
    ("for_unpack_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in d|items %}{{ k }};{% endfor %}", {}),
    ("for_dict_and_string", "{% for k in d %}{{ k }}{% endfor %}|{% for c in 'héy' %}[{{ c }}]{% endfor %}", {}),
    ("for_nested_loop", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }};{% endfor %}", {}),
    ("for_prev_next", "{% for i in items %}{{ loop.previtem }}<{{ i }}>{{ loop.nextitem }};{% endfor %}", {}),
    ("for_cycle", "{% for i in items %}{{ loop.cycle('odd', 'even') }}{% endfor %}", {}),
    ("break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("set_scoping", "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = i * 10 %}{{ x }};{% endfor %}{{ x }}{% if t %}{% set x = 5 %}{% endif %}{{ x }}", {}),
    ("set_tuple", "{% set a, b = [1, 2] %}{{ a }}{{ b }}", {}),
    ("set_block", "{% set body %}\n  hi {{ n }}\n{% endset %}[{{ body }}]{% set up | upper | trim %} x {% endset %}[{{ up }}]", {}),
    ("namespace", "{% set ns = namespace(count=0, found=none) %}{% for m in msgs %}{% set ns.count = ns.count + 1 %}{% if m.role == 'assistant' %}{% set ns.found = loop.index0 %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }}", {}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}", {}),
    ("macro_reads_outer", "{% set sep = '-' %}{% macro j(xs) %}{{ xs | join(sep) }}{% endmacro %}{{ j(items) }}", {}),
    ("raise_exception_message", "{% if t %}{{ raise_exception('Bad role: ' + 'x') }}{% endif %}", {}),
    # filters
    ("filter_trim_case", "[{{ s|trim }}] {{ s|upper }} {{ s|lower }} {{ 'hello world'|capitalize }} {{ 'hello wORLD-foo (bar) x'|title }} [{{ 'xxhixx'|trim('x') }}]", {}),
    ("filter_length_default", "{{ items|length }} {{ 'héllo'|length }} {{ d|count }} {{ missing|length }} {{ missing|default('dv') }} {{ nothing|default('dv') }} {{ ''|default('dv', true) }} {{ missing|d('x') }}", {}),
    ("filter_join_list", "{{ items|join(', ') }} {{ msgs|join('/', attribute='role') }} {{ 'abc'|list }} {{ d|list }} {{ items|join }}", {}),
    ("filter_replace_first_last", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ items|first }} {{ items|last }} {{ 'xyz'|first }} [{{ empty|first }}]", {}),
    ("filter_string_int_float", "{{ 12|string ~ 'x' }} {{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(9) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 3|float }} {{ true|int }}", {}),
    ("filter_round_abs", "{{ 2.567|round }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(0, 'floor') }} {{ -3|abs }} {{ -2.5|abs }} {{ 3|round }}", {}),
    ("filter_reverse_sort_unique", "{{ items|reverse|list }} {{ 'abc'|reverse }} {{ items|sort }} {{ words|sort }} {{ words|sort(case_sensitive=true) }} {{ items|sort(reverse=true) }} {{ words|unique|list }} {{ msgs|sort(attribute='content')|map(attribute='content')|list }}", {}),
    ("filter_dictsort", "{{ d|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }} {{ {'b': 1, 'A': 2}|dictsort(reverse=true) }}", {}),
    ("filter_map_select", "{{ msgs|map(attribute='role')|list }} {{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ msgs|rejectattr('extra')|list|length }} {{ msgs|selectattr('extra')|list|length }} {{ items|select('odd')|list }} {{ items|reject('odd')|list }} {{ words|map('upper')|list }} {{ msgs|selectattr('role', '==', 'assistant')|list|length }}", {}),
    ("filter_indent", "[{{ text|indent }}] [{{ text|indent(2, true) }}] [{{ text|indent(2, blank=true) }}] [{{ 'a\\nb\\n'|indent('> ') }}]", {}),
    ("filter_tojson", "{{ d|tojson }} {{ msgs[2]|tojson }} {{ 'é\"\\n'|tojson }} {{ [1.0, 2.5, none, true]|tojson }} {{ {}|tojson }} {{ []|tojson(indent=2) }}", {}),
    ("filter_tojson_indent", "{{ {'a': [1, {'b': none}], 'c': {}}|tojson(indent=4) }}|{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}", {}),
    ("filter_min_max_sum", "{{ items|min }} {{ items|max }} {{ items|sum }} {{ words|max }}", {}),
    ("filter_safe", "{{ '<b>'|safe }} {{ 1|safe }}", {}),
    # tests
    ("tests_types", "{{ 'a' is string }} {{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ d is mapping }} {{ items is iterable }} {{ 'x' is iterable }} {{ missing is iterable }} {{ 1 is iterable }} {{ items is sequence }} {{ true is boolean }} {{ 1 is boolean }} {{ none is none }} {{ missing is none }}", {}),
    ("tests_defined", "{{ missing is defined }} {{ missing is undefined }} {{ n is defined }} {{ d.a is defined }} {{ d.zz is defined }} {{ nothing is defined }} {{ n is not defined }}", {}),
    ("tests_values", "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ 3 is odd }} {{ 4 is even }} {{ 5 is equalto 5 }} {{ 5 is equalto(6) }} {{ 6 is divisibleby 3 }} {{ 'a' is in 'abc' }} {{ 2 is in items }} {{ 'ab' is lower }} {{ 'AB' is upper }}", {}),
    ("tests_comparisons", "{{ 1 is lt 2 }} {{ 2 is gt 1 }} {{ 2 is ge 2 }} {{ 1 is ne 2 }} {{ 1 is eq 1 }} {{ none is sameas none }} {{ false is sameas false }}", {}),
    # methods
    ("str_methods", "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b \\n c '.split() }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'Hi'.upper() }}{{ 'Hi'.lower() }}|{{ 'hello wORLD'.title() }}|{{ 'hELLO'.capitalize() }}", {}),
    ("str_methods_2", "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'a-b-c'.replace('-', '+') }} {{ 'a-b-c'.replace('-', '+', 1) }} {{ '{} and {}'.format(1, 'x') }} {{ '{0}{0}{name}'.format('a', name='b') }} {{ 'hello'.find('l') }} {{ 'hello'.count('l') }} {{ ', '.join(['a', 'b']) }} {{ 'a\\nb'.splitlines() }} {{ '123'.isdigit() }}", {}),
    ("qwen3_reasoning_split", "{% set c = '<think>\\nabc\\n</think>\\n\\nanswer' %}[{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}][{{ c.split('</think>')[-1].lstrip('\\n') }}]", {}),
    ("dict_methods", "{{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 5) }}", {}),
    ("globals", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }} {{ dict(a=1, b='x') }} {{ namespace(a=1).a }}", {}),
    ("tuple_literal", "{{ (1, 2) }} {{ (1,) }} {% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}", {}),
    # markupsafe.Markup from |safe: `+` escapes the plain operand (functionary-v3.1 does this)
    ("markup_plus_escapes", "{{ 'a<'|safe + '<b>\"' }} {{ '&x' + 'y'|safe }} {{ ('q'|safe + d|tojson) }} {{ '<'|safe ~ '<' }} {{ ('<'|safe) * 2 }}", {}),
    ("markup_methods", "{{ ('<a> '|safe).strip() }} {{ ('x'|safe).replace('x', '<') }} {{ ('a,b'|safe).split(',') }} {{ ('{}'|safe).format('<') }} {{ ('<'|safe)|trim }} {{ ('a'|safe)|upper + '&' }} {{ ('<x>'|safe)[1] + '&' }}", {}),
    ("markup_escape_filter", "{{ \"<a & 'b'>\"|e }} {{ '<'|escape|escape }} {{ ('<'|safe)|string + '<' }} {{ 5|e }}", {}),
    ("filter_block", "{% filter upper %}\n  hi {{ n }}\n{% endfilter %}|{%- filter trim | replace('a', 'b') -%}  aa  {%- endfilter -%}|", {}),
    ("select_map_on_none", "{{ nothing|selectattr('x')|list }} {{ nothing|map(attribute='x')|list }} {{ missing|select|list }} {{ none|rejectattr('type', 'equalto', 'x')|list|length > 0 }}", {}),
    ("dict_equality_and_filtered_items", "{{ msgs[0] == {'role': 'user', 'content': 'hi'} }} {{ msgs[0] == msgs[-1] }} {% for k, v in msgs[2].items() if k != 'extra' %}{{ k }}={{ v }};{% endfor %}", {}),
    # generator-returning filters (select*, reject*, map, unique, items, reverse) are always truthy
    ("generator_truthiness", "{% if empty|select('odd') %}gen{% endif %} {% if empty|select('odd')|list %}list{% else %}empty{% endif %} {{ items|reverse|reverse }} {{ (items|unique|list)[0] }} {{ d.items() }} {{ d.keys() }}", {}),
    ("tests_case_and_parity_edges", "{{ '' is upper }} {{ '1' is lower }} {{ 'a1' is lower }} {{ 2.5 is even }} {{ 2.5 is odd }} {{ 3.0 is odd }} {{ -3 is odd }} {{ true is odd }}", {}),
    ("error_unhashable_in_dict", "{{ [1] in d }}", {}),
    ("error_int_of_undefined", "{{ missing|int }}", {}),
    ("error_indent_non_string", "{{ n|indent }}", {}),
    ("error_len_of_generator", "{{ items|select('odd')|length }}", {}),
    ("subscript_failures_are_undefined", "[{{ (items|map('string'))[0] }}][{{ n[0] }}][{{ nothing[0] }}]", {}),
    ("error_slice_of_generator", "{{ (items|select)[1:] }}", {}),
    ("error_slice_of_int", "{{ n[1:] }}", {}),
    # errors jinja2 raises at render time (the C++ must fail too, never print something)
    ("error_attr_of_undefined", "{{ missing.attr }}", {}),
    ("error_item_of_undefined", "{{ missing['x'] }}", {}),
    ("error_add_str_int", "{{ 'a' + 1 }}", {}),
    ("error_add_undefined", "{{ missing + 1 }}", {}),
    ("error_div_zero", "{{ 1 / 0 }}", {}),
    ("error_call_undefined", "{{ nope() }}", {}),
    ("error_tojson_undefined", "{{ missing|tojson }}", {}),
    ("error_items_of_list", "{% for k in items|items %}{% endfor %}", {}),
    ("error_iterate_none", "{% for x in nothing %}{% endfor %}", {}),
    ("error_iterate_int", "{% for x in n %}{% endfor %}", {}),
    ("error_compare_str_int", "{{ 'a' < 1 }}", {}),
    ("error_set_attr_non_namespace", "{% set d.x = 1 %}", {}),
    ("error_mutating_method", "{{ items.append(4) }}", {}),
    ("error_length_of_int", "{{ n|length }}", {}),
    ("error_in_none", "{{ 1 in nothing }}", {}),
]


def jinja_cases():
    out = []
    for name, source, extra in JINJA_CASES:
        context = dict(CTX)
        context.update(extra)
        case = {"name": name, "template": source, "context": context}
        try:
            case["expected"] = ENV.from_string(source).render(**context)
        except Exception as e:  # noqa: BLE001 - any jinja2/Python error means "must fail"
            case["expected_error"] = f"{type(e).__name__}: {e}"
        out.append(case)
    return out


def main():
    for filename, cases in (("goldens.json", model_goldens()), ("jinja_cases.json", jinja_cases())):
        payload = {
            "generator": "scripts/gen_chat_template_goldens.py",
            "jinja2_version": jinja2.__version__,
            "cases": cases,
        }
        path = os.path.join(FIXTURES, filename)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(payload, f, ensure_ascii=False, indent=1)
            f.write("\n")
        n_err = sum("expected_error" in c for c in cases)
        print(f"wrote {path}: {len(cases)} cases ({n_err} expected errors)")


if __name__ == "__main__":
    main()
