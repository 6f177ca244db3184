/*
 * Tests of the Jinja interpreter (src/text/jinja.h): the language, case by
 * case, each with the text Jinja2 renders (trim_blocks and lstrip_blocks
 * on, as Hugging Face renders chat templates), and its errors.
 *
 *     test_jinja                         the unit tests
 *     test_jinja --render TMPL CTX NOW   renders file TMPL with the JSON
 *                                        context of file CTX, strftime_now at
 *                                        NOW (seconds since the epoch); prints
 *                                        the text, or "ERROR: message" and
 *                                        exits 3 (tests/jinja/compare.py)
 */
#include "common/check.h"
#include "core/hostmem.h"
#include "text/chat.h"
#include "text/jinja.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Errors are expected here; keep them off stderr. */
static void quiet_log(cllm_log_level level, const char *msg, void *user_data) {
    (void)level;
    (void)msg;
    (void)user_data;
}

/* 2025-01-15 10:30:00 UTC */
#define FIXED_NOW 1736937000

typedef struct jcase {
    const char *tmpl;
    const char *ctx; /* JSON, or NULL */
    const char *want;
} jcase;

static void run_cases(const char *group, const jcase *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char *out = NULL;
        size_t len = 0;
        const cllm_status st =
            cllm_jinja_render(cases[i].tmpl, cases[i].ctx, FIXED_NOW, &out, &len);
        CHECKF(st == CLLM_OK, "%s %zu: %s: %s", group, i, cases[i].tmpl, cllm_last_error());
        if (st != CLLM_OK) continue;
        CHECKF(strcmp(out, cases[i].want) == 0 && len == strlen(out),
               "%s %zu: %s\n  got  [%s]\n  want [%s]", group, i, cases[i].tmpl, out, cases[i].want);
        cllm_free(out);
    }
}

static void test_text_and_whitespace(void) {
    static const jcase cases[] = {
        {"hello", NULL, "hello"},
        {"hello\n", NULL, "hello"}, /* one trailing newline dropped */
        {"hello\n\n", NULL, "hello\n"},
        {"a\r\nb", NULL, "a\nb"},
        {"{# comment #}x", NULL, "x"},
        {"{{ 'a' }}\n{{ 'b' }}", NULL, "a\nb"},
        {"{% if true %}\nyes\n{% endif %}\nend", NULL, "yes\nend"}, /* trim_blocks */
        {"  {% if true %}x{% endif %}", NULL, "x"},                 /* lstrip_blocks */
        {"a  {% if true %}x{% endif %}", NULL, "a  x"},             /* not at a line start */
        {"  {%+ if true %}x{% endif %}", NULL, "  x"},
        {"a  \n  {%- if true -%}  \n x {%- endif %}", NULL, "ax"},
        {"{{- ' a ' -}}", NULL, " a "},
        {"x   {{- 'a' -}}   y", NULL, "xay"},
        {"  {# c #}\nx", NULL, "x"},
        {"{% if true %}a{% endif %}\n", NULL, "a"},
        {"{%- if true %}\n  a\n{%- endif %}", NULL, "  a"},
    };
    run_cases("whitespace", cases, CLLM_ARRAY_SIZE(cases));
}

static void test_expressions(void) {
    static const jcase cases[] = {
        {"{{ 1 + 2 * 3 }}", NULL, "7"},
        {"{{ (1 + 2) * 3 }}", NULL, "9"},
        {"{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }}", NULL,
         "3 -4 1 2 1024"},
        {"{{ 1 / 2 }} {{ 4 / 2 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1.5e-7 }}", NULL,
         "0.5 2.0 0.30000000000000004 1e+16 1.5e-07"},
        {"{{ 'a' ~ 1 ~ none ~ true }}", NULL, "a1NoneTrue"},
        {"{{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ [1] + [2] }}", NULL, "abcd ababab [1, 2]"},
        {"{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }}", NULL,
         "True False True True"},
        {"{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}", NULL,
         "True True True True"},
        {"{{ not true or false and true }}", NULL, "False"},
        {"{{ 0 or 'x' }} {{ 1 and [] }} {{ none or none }}", NULL, "x [] None"},
        {"{{ 'y' if 1 else 'n' }}{{ 'y' if 0 else 'n' }}[{{ 'y' if 0 }}]", NULL, "yn[]"},
        {"{{ [1, 'a', none, true, 1.5, {'k': [2]}] }}", NULL,
         "[1, 'a', None, True, 1.5, {'k': [2]}]"},
        {"{{ {'a': \"it's\", 'b': 'say \"hi\"', 'c': 'x\\ny'} }}", NULL,
         "{'a': \"it's\", 'b': 'say \"hi\"', 'c': 'x\\ny'}"},
        {"{{ (1, 2) }} {{ (1,) }}", NULL, "(1, 2) (1,)"},
        {"{{ 'abcdef'[1:3] }}{{ 'abcdef'[::-1] }}{{ 'abcdef'[-2:] }}{{ [1,2,3][1] }}", NULL,
         "bcfedcbaef2"},
        {"{{ 'héllo'[1] }}{{ 'héllo'|length }}{{ 'héllo'[:2] }}", NULL, "é5hé"},
        {"{{ x.a }}{{ x['b'] }}{{ x.c.d }}{{ x.missing }}",
         "{\"x\": {\"a\": 1, \"b\": 2, "
         "\"c\": {\"d\": 3}}}",
         "123"},
        {"{{ 'a' 'b' }}{{ \"\\u00e9\\t\" }}", NULL, "ab\xc3\xa9\t"},
        {"{{ -3|abs }} {{ -(3) }} {{ +2 }}", NULL, "3 -3 2"},
    };
    run_cases("expressions", cases, CLLM_ARRAY_SIZE(cases));
}

static void test_statements(void) {
    static const jcase cases[] = {
        {"{% if 0 %}a{% elif 1 %}b{% else %}c{% endif %}", NULL, "b"},
        {"{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
         "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
         NULL, "103TrueFalse3;212FalseFalse3;321FalseTrue3;"},
        {"{% for x in [] %}a{% else %}empty{% endfor %}", NULL, "empty"},
        {"{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}", NULL,
         "2242"},
        {"{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }} {% endfor %}", NULL,
         "a=1 b=2 "},
        {"{% for k in {'z': 1, 'a': 2} %}{{ k }}{% endfor %}", NULL, "za"},
        {"{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}",
         NULL, "13"},
        {"{% for x in [1, 2, 3] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}", NULL,
         "1"},
        {"{% for x in [1, 2] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}", NULL,
         "-2;1-;"},
        /* set inside a loop stays in the loop; a namespace carries it out */
        {"{% set a = 1 %}{% for x in [1] %}{% set a = 2 %}{% endfor %}{{ a }}", NULL, "1"},
        {"{% set ns = namespace(a=1) %}{% for x in [1, 2] %}{% set ns.a = ns.a + x %}{% endfor %}"
         "{{ ns.a }}",
         NULL, "4"},
        {"{% if true %}{% set a = 5 %}{% endif %}{{ a }}", NULL, "5"},
        {"{% set a, b = 1, 2 %}{{ b }}{{ a }}", NULL, "21"},
        {"{% set t %}x{{ 1 }}{% endset %}[{{ t }}]", NULL, "[x1]"},
        {"{% set t | upper %}abc{% endset %}{{ t }}", NULL, "ABC"},
        {"{% macro m(a, b='d') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, "
         "a=4) }}",
         NULL, "1d1243"},
        {"{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}", NULL,
         "<in>"},
        {"{% macro w() %}{{ caller(5) }}{% endmacro %}{% call(x) w() %}{{ x * 2 }}{% endcall %}",
         NULL, "10"},
        {"{% filter upper %}abc{% endfilter %}", NULL, "ABC"},
        {"{% generation %}g{% endgeneration %}", NULL, "g"},
        {"{% set l = [] %}{% set _ = l.append(1) %}{{ l }}", NULL, "[1]"},
        {"{% for i in range(3) %}{{ i }}{% endfor %}{{ range(1, 7, 2) }}", NULL, "012[1, 3, 5]"},
        {"{{ dict(a=1) }} {{ namespace(b=2).b }}", NULL, "{'a': 1} 2"},
        {"{{ strftime_now('%Y-%m-%d %d %b %Y') }}", NULL, "2025-01-15 15 Jan 2025"},
    };
    run_cases("statements", cases, CLLM_ARRAY_SIZE(cases));
}

static void test_filters_tests_methods(void) {
    static const jcase cases[] = {
        {"{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}", NULL, "a b|a"},
        {"{{ {'a': [1, 'é'], 'b': none}|tojson }}", NULL, "{\"a\": [1, \"é\"], \"b\": null}"},
        {"{{ {'a': [1, 2], 'b': {}}|tojson(indent=2) }}", NULL,
         "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {}\n}"},
        {"{{ 'a\"\\n'|tojson }}", NULL, "\"a\\\"\\n\""},
        {"{{ [1, 2]|length }}{{ {'a': 1}|count }}{{ x|length }}", NULL, "210"},
        {"{{ {'a': 1}|items|list }}", NULL, "[('a', 1)]"},
        {"{{ xs|selectattr('t', 'equalto', 'a')|map(attribute='v')|join(',') }}",
         "{\"xs\": [{\"t\": \"a\", \"v\": 1}, {\"t\": \"b\", \"v\": 2}, {\"t\": \"a\", \"v\": 3}]}",
         "1,3"},
        {"{{ xs|rejectattr('t', 'equalto', 'a')|list|length }}{{ xs|selectattr('v')|list|length }}",
         "{\"xs\": [{\"t\": \"a\", \"v\": 1}, {\"t\": \"b\", \"v\": 0}]}", "11"},
        {"{{ x|default('d') }}{{ ''|default('e', true) }}{{ 0|default('f') }}", NULL, "de0"},
        {"{{ 'aBc'|upper }}{{ 'aBc'|lower }}{{ 'hello world'|capitalize }}{{ 'a-b c'|title }}",
         NULL, "ABCabcHello worldA-B C"},
        {"{{ 'aaa'|replace('a', 'b', 2) }}{{ [3, 1]|first }}{{ [3, 1]|last }}", NULL, "bba31"},
        {"{{ 42|string ~ '!' }}{{ '12'|int + 1 }}{{ 'x'|int }}{{ '2.5'|float }}", NULL,
         "42!1302.5"},
        {"{{ 2.5|round }} {{ 3.14159|round(2) }} {{ 3.1|round(0, 'ceil') }}", NULL, "2.0 3.14 4.0"},
        {"{{ ['b', 'A', 'a', 'B']|unique|list }}{{ ['b', 'C', 'a']|sort }}", NULL,
         "['b', 'A']['a', 'b', 'C']"},
        {"{{ {'b': 1, 'a': 2}|dictsort }}", NULL, "[('a', 2), ('b', 1)]"},
        {"{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}", NULL,
         "a\n  b\n\n  c|  a\n  b"},
        {"{{ '<a&b>'|e }}{{ '<x>'|safe }}", NULL, "&lt;a&amp;b&gt;<x>"},
        {"{{ [1, 2, 3]|map('string')|join }}{{ [3, 1, 2]|max }}{{ [3, 1, 2]|min }}", NULL, "12331"},
        {"{{ x is defined }}{{ none is none }}{{ 'a' is string }}{{ {} is mapping }}"
         "{{ [] is iterable }}{{ 1 is number }}{{ [] is sequence }}{{ true is true }}"
         "{{ 1 is true }}{{ 2 is equalto 2 }}{{ 3 is divisibleby 3 }}{{ x is not defined }}",
         NULL, "FalseTrueTrueTrueTrueTrueTrueTrueFalseTrueTrueTrue"},
        {"{{ ' a '.strip() }}|{{ 'xa'.lstrip('x') }}|{{ 'ax\\n'.rstrip() }}", NULL, "a|a|ax"},
        {"{{ 'a b  c'.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}", NULL,
         "['a', 'b', 'c']['a', 'b', '', 'c']['a', 'b,c']"},
        {"{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'a.b'.replace('.', '-') "
         "}}",
         NULL, "TrueTruea-b"},
        {"{{ 'ab'.upper() }}{{ 'AB'.lower() }}{{ 'hello there'.title() }}", NULL,
         "ABabHello There"},
        {"{{ '{}-{}'.format(1, 'x') }}{{ '{a}'.format(a=2) }}", NULL, "1-x2"},
        {"{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 7) }}{{ d.keys()|list }}{{ d.values()|list "
         "}}",
         "{\"d\": {\"a\": 1}}", "1None7['a'][1]"},
    };
    run_cases("filters", cases, CLLM_ARRAY_SIZE(cases));
}

/* A template that must fail, with `needle` in the message. */
static void expect_error(const char *tmpl, const char *ctx, cllm_status want, const char *needle) {
    char *out = NULL;
    const cllm_status st = cllm_jinja_render(tmpl, ctx, FIXED_NOW, &out, NULL);
    CHECKF(st == want, "%s: status %d, want %d", tmpl, (int)st, (int)want);
    CHECKF(out == NULL, "%s: output set on failure", tmpl);
    CHECKF(strstr(cllm_last_error(), needle) != NULL, "%s: message [%s] lacks [%s]", tmpl,
           cllm_last_error(), needle);
}

static void test_errors(void) {
    expect_error("{{ raise_exception('Roles must alternate') }}", NULL, CLLM_ERR_FORMAT,
                 "Roles must alternate");
    expect_error("a\n  {% if %}", NULL, CLLM_ERR_FORMAT, "line 2, column 9");
    expect_error("{% if true %}x", NULL, CLLM_ERR_FORMAT, "endif");
    expect_error("{% for x in y %}", NULL, CLLM_ERR_FORMAT, "endfor");
    expect_error("{{ x.y.z }}", NULL, CLLM_ERR_FORMAT, "'x' is undefined");
    expect_error("{{ 1 + 'a' }}", NULL, CLLM_ERR_FORMAT, "unsupported operand");
    expect_error("{{ x|no_such }}", NULL, CLLM_ERR_FORMAT, "no filter named 'no_such'");
    expect_error("{{ 1 / 0 }}", NULL, CLLM_ERR_FORMAT, "division by zero");
    expect_error("{{ 'unterminated }}", NULL, CLLM_ERR_FORMAT, "unterminated string");
    expect_error("{% include 'x' %}", NULL, CLLM_ERR_FORMAT, "unknown tag 'include'");
    expect_error("{{ x }}", "{\"x\": [1,}", CLLM_ERR_FORMAT, "context JSON");
    expect_error("{{ x }}", "[1]", CLLM_ERR_FORMAT, "not a JSON object");
    expect_error("{% set x = 1 %}{% set x.a = 2 %}", NULL, CLLM_ERR_FORMAT, "non-namespace");
    /* bounds */
    expect_error("{% set r = range(1000) %}{% for a in r %}{% for b in r %}{% for c in r %}"
                 "{% endfor %}{% endfor %}{% endfor %}",
                 NULL, CLLM_ERR_TOO_LARGE, "steps");
    expect_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL, CLLM_ERR_TOO_LARGE,
                 "nest deeper");
    expect_error("{% set s = 'x' * 10000000 %}{% for i in range(10) %}{{ s }}{% endfor %}", NULL,
                 CLLM_ERR_TOO_LARGE, "exceeds");
    char deep[2000];
    size_t n = 0;
    n += (size_t)snprintf(deep + n, sizeof(deep) - n, "{{ ");
    for (int i = 0; i < 600; i++) deep[n++] = '(';
    deep[n] = '\0';
    expect_error(deep, NULL, CLLM_ERR_FORMAT, "nest");
}

/* Every allocation failed in turn: a status, never a crash or a leak. */
static void test_out_of_memory(void) {
    const char *tmpl =
        "{% for m in messages %}{{ m.role|upper }}: {{ m.content|trim }}\n{% endfor %}";
    const char *ctx = "{\"messages\": [{\"role\": \"user\", \"content\": \" hi \"}]}";
    int failures = 0;
    for (int64_t k = 1; k < 64; k++) {
        cllm_hostmem_fail_at(k, false);
        char *out = NULL;
        const cllm_status st = cllm_jinja_render(tmpl, ctx, FIXED_NOW, &out, NULL);
        const int64_t failed = cllm_hostmem_failures();
        cllm_hostmem_fail_at(-1, false);
        if (st == CLLM_OK) {
            CHECK(strcmp(out, "USER: hi\n") == 0);
            cllm_free(out);
            if (failed == 0) break;
        } else {
            CHECK(st == CLLM_ERR_NOMEM && out == NULL);
            failures++;
        }
    }
    CHECK(failures > 0);
}

/* SmolLM2-Instruct's template and Gemma 3's (as Google ships it, abridged of
 * its image handling) through Jinja give what the built-in styles give. */
static void test_chat_templates(void) {
    static const char k_smollm2[] =
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
        "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|im_start|>assistant\n' }}{% endif %}";
    static const char k_gemma3[] =
        "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- set "
        "first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n    {%- set loop_messages = "
        "messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n    {%- set "
        "loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n    "
        "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n        {{ "
        "raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") "
        "}}\n    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set "
        "role = \"model\" -%}\n    {%- else -%}\n        {%- set role = message['role'] -%}\n    "
        "{%- endif -%}\n    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if "
        "loop.first else \"\") }}\n    {%- if message['content'] is string -%}\n        {{ "
        "message['content'] | trim }}\n    {%- endif -%}\n    {{ '<end_of_turn>\\n' }}\n{%- "
        "endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\\n'}}\n{%- "
        "endif -%}\n";
    const cllm_chat_msg conv[] = {
        {"system", "Be brief."}, {"user", " Hi! "}, {"assistant", "Hello."}, {"user", "Bye"}};
    for (int gen = 0; gen <= 1; gen++) {
        for (size_t first = 0; first <= 1; first++) {
            const cllm_chat_msg *m = conv + first;
            const size_t n = CLLM_ARRAY_SIZE(conv) - first;
            char *a = NULL, *b = NULL;
            CHECK(cllm_chat_render_template(k_gemma3, m, n, gen, "<bos>", "<eos>", &a, NULL) ==
                  CLLM_OK);
            CHECK(cllm_chat_render_alloc(CLLM_CHAT_STYLE_GEMMA, m, n, gen, &b, NULL) == CLLM_OK);
            CHECKF(a && b && strcmp(a, b) == 0, "gemma3 gen %d:\n[%s]\n[%s]", gen, a, b);
            cllm_free(a);
            cllm_free(b);
            /* SmolLM2 adds its default system prompt when there is none */
            cllm_chat_msg with_sys[4];
            size_t k = 0;
            if (first)
                with_sys[k++] = (cllm_chat_msg){"system", "You are a helpful AI assistant "
                                                          "named SmolLM, trained by Hugging "
                                                          "Face"};
            for (size_t i = 0; i < n; i++) with_sys[k++] = m[i];
            CHECK(cllm_chat_render_template(k_smollm2, m, n, gen, "<|im_start|>", "<|im_end|>", &a,
                                            NULL) == CLLM_OK);
            CHECK(cllm_chat_render_alloc(CLLM_CHAT_STYLE_CHATML, with_sys, k, gen, &b, NULL) ==
                  CLLM_OK);
            CHECKF(a && b && strcmp(a, b) == 0, "smollm2 gen %d:\n[%s]\n[%s]", gen, a, b);
            cllm_free(a);
            cllm_free(b);
        }
    }
    /* Gemma's template refuses roles out of turn, with its message */
    const cllm_chat_msg bad[] = {{"user", "a"}, {"user", "b"}};
    char *out = NULL;
    CHECK(cllm_chat_render_template(k_gemma3, bad, 2, true, "<bos>", "", &out, NULL) ==
          CLLM_ERR_FORMAT);
    CHECK(out == NULL && strstr(cllm_last_error(), "roles must alternate") != NULL);
    /* the public entry, with a JSON context */
    CHECK(cllm_chat_template_render("{{ messages[0].content }}{{ x }}",
                                    "{\"messages\": [{\"content\": \"a\"}], \"x\": 1}", &out,
                                    NULL) == CLLM_OK);
    CHECK(out && strcmp(out, "a1") == 0);
    cllm_free(out);
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = '\0';
    fclose(f);
    return s;
}

static int render_files(const char *tmpl_path, const char *ctx_path, const char *now) {
    char *tmpl = read_file(tmpl_path), *ctx = read_file(ctx_path);
    if (!tmpl || !ctx) {
        fprintf(stderr, "test_jinja: cannot read %s or %s\n", tmpl_path, ctx_path);
        free(tmpl);
        free(ctx);
        return 2;
    }
    char *out = NULL;
    size_t len = 0;
    const cllm_status st = cllm_jinja_render(tmpl, ctx, strtoll(now, NULL, 10), &out, &len);
    free(tmpl);
    free(ctx);
    if (st != CLLM_OK) {
        printf("ERROR: %s", cllm_last_error());
        return 3;
    }
    fwrite(out, 1, len, stdout);
    cllm_free(out);
    return 0;
}

int main(int argc, char **argv) {
    cllm_log_set(quiet_log, NULL);
    if (argc == 5 && strcmp(argv[1], "--render") == 0)
        return render_files(argv[2], argv[3], argv[4]);
    setenv("TZ", "UTC", 1);
    test_text_and_whitespace();
    test_expressions();
    test_statements();
    test_filters_tests_methods();
    test_errors();
    test_out_of_memory();
    test_chat_templates();
    return check_summary("test_jinja");
}
