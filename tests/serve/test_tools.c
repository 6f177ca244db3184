/*
 * cllm serve's tool calls without a model (tools/cllm/server-tools.c): the
 * form of a call told from a chat template's text; calls read back from
 * generated text in each form (Hermes/Qwen tags, Llama 3's JSON with
 * "parameters", Mistral's [TOOL_CALLS] list, the generic JSON, fenced or
 * not), text that is no call left as content; the streamed reading (what
 * may be sent as content before the answer ends) never going back, never
 * sending a call's text, and ending with the same content and calls as the
 * whole answer for every split of it; and the grammars that force a call
 * in each form, fed calls they must take and text they must refuse.
 */
#include "common/check.h"
#include "server.h"
#include "text/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_format(void) {
    CHECK(srv_tools_format(NULL) == SRV_TOOLFMT_GENERIC);
    CHECK(srv_tools_format("{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}") ==
          SRV_TOOLFMT_GENERIC);
    CHECK(srv_tools_format("{% if tools %}<tools>{{ tools }}</tools>{% endif %}"
                           "{{ '<tool_call>\\n' }}") == SRV_TOOLFMT_HERMES);
    CHECK(srv_tools_format("{{ '[AVAILABLE_TOOLS]' }}{{ '[TOOL_CALLS][' }}") ==
          SRV_TOOLFMT_MISTRAL);
    CHECK(srv_tools_format("{{ '<|python_tag|>' + call.name }}") == SRV_TOOLFMT_LLAMA3);
    CHECK(srv_tools_format("{{ '<|start_header_id|>' }}{{ '{\"name\": \"' + f.name + '\", "
                           "\"parameters\": ' }}") == SRV_TOOLFMT_LLAMA3);
    CHECK(srv_tools_format("{{ '[AVAILABLE_TOOLS]' }}{{ '[TOOL_CALLS]' + tc.function.name + "
                           "'[ARGS]' + tc.function.arguments|tojson }}") ==
          SRV_TOOLFMT_MISTRAL_ARGS);
    CHECK(srv_tools_format("{{ '<tool_call>\\n<function=' + tc.name + '>\\n' }}{% for k in "
                           "args %}{{ '<parameter=' + k + '>\\n' }}{% endfor %}") ==
          SRV_TOOLFMT_XML);
    /* "parameters" alone (a tool's schema in the prompt) is not Llama 3's */
    CHECK(srv_tools_format("{{ tool.parameters }} \"parameters\"") == SRV_TOOLFMT_GENERIC);
}

/* Calls read from text (for a request offering `tools`, or NULL): their
 * names joined by ',' into names[], the first call's arguments into args[];
 * -1 when none, else their count. */
static int calls_of(srv_tool_format f, const json_t *tools, const char *text, size_t len,
                    bool start, size_t *content_len, char names[128], char args[128]) {
    names[0] = args[0] = '\0';
    json_t *calls = srv_tools_extract(f, tools, text, len, start, content_len);
    if (!calls) return -1;
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *fn = json_object_get(c, "function");
        const char *id = json_string_value(json_object_get(c, "id"));
        const char *type = json_string_value(json_object_get(c, "type"));
        CHECK(id && !strncmp(id, "call_", 5) && type && !strcmp(type, "function"));
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *a = json_string_value(json_object_get(fn, "arguments"));
        CHECK(name && a);
        if (!name || !a) continue;
        if (i > 0) strncat(names, ",", 127 - strlen(names));
        strncat(names, name, 127 - strlen(names));
        if (i == 0) snprintf(args, 128, "%s", a);
    }
    const int n = (int)json_array_size(calls);
    json_decref(calls);
    return n;
}

typedef struct extract_case {
    srv_tool_format f;
    const char *text;
    int n_calls;         /* -1: no calls */
    const char *content; /* the text before the calls (n_calls >= 0) */
    const char *names, *args;
} extract_case;

static const extract_case k_cases[] = {
    {SRV_TOOLFMT_HERMES,
     "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}"
     "\n</tool_call>",
     1, "Let me look.", "get_weather", "{\"city\": \"Oslo\"}"},
    {SRV_TOOLFMT_HERMES,
     "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": "
     "\"b\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>",
     2, "", "a,b", "{}"},
    /* a call not closed before the end (max_tokens) */
    {SRV_TOOLFMT_HERMES, "<tool_call>{\"name\": \"a\", \"arguments\": {\"k\": true}}", 1, "", "a",
     "{\"k\": true}"},
    {SRV_TOOLFMT_HERMES, "Hi <tool_call>{\"name\": \"a\", \"argu", -1, NULL, NULL, NULL},
    {SRV_TOOLFMT_HERMES, "The tag <tool_call> is how I call tools.", -1, NULL, NULL, NULL},
    {SRV_TOOLFMT_HERMES, "{\"name\": \"a\", \"arguments\": {}}", 1, "", "a", "{}"},
    {SRV_TOOLFMT_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}", 1, "",
     "get_weather", "{\"city\": \"Rome\"}"},
    {SRV_TOOLFMT_LLAMA3, "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"n\": 1}}", 1, "", "a",
     "{\"n\": 1}"},
    {SRV_TOOLFMT_LLAMA3,
     "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"s\": \"}\"}}", 2,
     "", "a,b", "{}"},
    {SRV_TOOLFMT_LLAMA3, "It is sunny in Rome.", -1, NULL, NULL, NULL},
    {SRV_TOOLFMT_MISTRAL,
     "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": \"x\"}}, {\"name\": \"b\", "
     "\"arguments\": {}}]",
     2, "", "a,b", "{\"q\": \"x\"}"},
    /* [TOOL_CALLS] is a control token, not in the generated text */
    {SRV_TOOLFMT_MISTRAL, " [{\"name\": \"a\", \"arguments\": {}}]", 1, "", "a", "{}"},
    {SRV_TOOLFMT_MISTRAL, "Sure: [TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}]", 1,
     "Sure:", "a", "{}"},
    {SRV_TOOLFMT_MISTRAL, "[1, 2, 3] are numbers.", -1, NULL, NULL, NULL},
    {SRV_TOOLFMT_GENERIC, "{\"name\": \"a\", \"arguments\": \"{\\\"z\\\": 0}\"}", 1, "", "a",
     "{\"z\": 0}"},
    {SRV_TOOLFMT_GENERIC, "```json\n[{\"name\": \"a\", \"arguments\": {}}]\n```\n", 1, "", "a",
     "{}"},
    {SRV_TOOLFMT_GENERIC, "```\n{\"name\": \"a\", \"arguments\": {}}\n```", 1, "", "a", "{}"},
    {SRV_TOOLFMT_GENERIC, "```python\nprint(1)\n```", -1, NULL, NULL, NULL},
    {SRV_TOOLFMT_GENERIC, "Here: {\"name\": \"a\", \"arguments\": {}}", -1, NULL, NULL, NULL},
    {SRV_TOOLFMT_GENERIC, "{\"name\": \"not a name\", \"arguments\": {}}", -1, NULL, NULL, NULL},
    {SRV_TOOLFMT_GENERIC, "{\"name\": \"a\"}", -1, NULL, NULL, NULL},
    {SRV_TOOLFMT_GENERIC, "{\"name\": \"a\", \"arguments\": {}} and more", -1, NULL, NULL, NULL},
    {SRV_TOOLFMT_MISTRAL_ARGS, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\"}", 1, "",
     "get_weather", "{\"city\": \"Oslo\"}"},
    {SRV_TOOLFMT_MISTRAL_ARGS, "Sure. [TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[ARGS]{\"x\": 1}", 2,
     "Sure.", "a,b", "{}"},
    /* [TOOL_CALLS] and [ARGS] are control tokens, not in the generated text */
    {SRV_TOOLFMT_MISTRAL_ARGS, "get_weather{\"city\": \"Rome\"}", 1, "", "get_weather",
     "{\"city\": \"Rome\"}"},
    {SRV_TOOLFMT_MISTRAL_ARGS, "[{\"name\": \"a\", \"arguments\": {}}]", 1, "", "a", "{}"},
    {SRV_TOOLFMT_MISTRAL_ARGS, "[TOOL_CALLS]a[ARGS]{\"x\": ", -1, NULL, NULL, NULL},
    {SRV_TOOLFMT_MISTRAL_ARGS, "Hello world{\"x\": 1}", -1, NULL, NULL, NULL},
    {SRV_TOOLFMT_MISTRAL_ARGS, "Hello", -1, NULL, NULL, NULL},
    {SRV_TOOLFMT_XML,
     "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n"
     "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
     1, "Let me check.", "get_weather", "{\"city\": \"New York\", \"days\": 3}"},
    {SRV_TOOLFMT_XML,
     "<tool_call>\n<function=a>\n</function>\n</tool_call>\n<tool_call>\n<function=b>\n"
     "<parameter=q>\n{\"k\": [1]}\n</parameter>\n</function>\n</tool_call>",
     2, "", "a,b", "{}"},
    {SRV_TOOLFMT_XML,
     "<tool_call>\n<function=a>\n<parameter=code>\nif a < b:\n    x()\n</parameter>\n"
     "</function>\n</tool_call>",
     1, "", "a", "{\"code\": \"if a < b:\\n    x()\"}"},
    {SRV_TOOLFMT_XML, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>", 1, "", "a",
     "{}"},
    {SRV_TOOLFMT_XML, "<tool_call>\n<function=a>\n<parameter=x>\n1\n</function>\n</tool_call>", -1,
     NULL, NULL, NULL},
    {SRV_TOOLFMT_XML, "<tool_call>\n<function=a b>\n</function>\n</tool_call>", -1, NULL, NULL,
     NULL},
    {SRV_TOOLFMT_GENERIC, "", -1, NULL, NULL, NULL},
    {SRV_TOOLFMT_GENERIC, "   ", -1, NULL, NULL, NULL},
};

static void check_extract(void) {
    for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); i++) {
        const extract_case *c = &k_cases[i];
        char names[128], args[128];
        size_t n = 12345;
        const int got = calls_of(c->f, NULL, c->text, strlen(c->text), true, &n, names, args);
        CHECKF(got == c->n_calls, "case %zu: %d calls, not %d", i, got, c->n_calls);
        if (got < 0 || got != c->n_calls) continue;
        CHECKF(n == strlen(c->content) && !memcmp(c->text, c->content, n),
               "case %zu: content %zu bytes", i, n);
        CHECKF(!strcmp(names, c->names), "case %zu: names %s", i, names);
        json_t *want = json_loads(c->args, 0, NULL), *have = json_loads(args, 0, NULL);
        CHECKF(want && have && json_equal(want, have), "case %zu: arguments %s", i, args);
        json_decref(want);
        json_decref(have);
    }
    /* not from the answer's beginning: a whole-answer call is not one */
    char names[128], args[128];
    size_t n = 0;
    static const char call[] = "{\"name\": \"a\", \"arguments\": {}}";
    CHECK(calls_of(SRV_TOOLFMT_GENERIC, NULL, call, strlen(call), false, &n, names, args) < 0);
    CHECK(calls_of(SRV_TOOLFMT_GENERIC, NULL, call, strlen(call), true, &n, names, args) == 1);

    /* an XML value that reads as JSON stays a string where the tool's
     * schema types the parameter string, and only there */
    static const char xml[] = "<tool_call>\n<function=f>\n<parameter=s>\n3\n</parameter>\n"
                              "<parameter=n>\n3\n</parameter>\n<parameter=u>\ntrue\n"
                              "</parameter>\n</function>\n</tool_call>";
    json_t *tools = json_loads(
        "[{\"type\": \"function\", \"function\": {\"name\": \"g\", \"parameters\": "
        "{\"properties\": {\"n\": {\"type\": \"string\"}}}}}, {\"type\": \"function\", "
        "\"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"s\": {\"type\": \"string\"}, \"n\": {\"type\": \"integer\"}}}}}]",
        0, NULL);
    CHECK(tools != NULL);
    CHECK(calls_of(SRV_TOOLFMT_XML, tools, xml, strlen(xml), true, &n, names, args) == 1);
    json_t *want = json_loads("{\"s\": \"3\", \"n\": 3, \"u\": true}", 0, NULL);
    json_t *have = json_loads(args, 0, NULL);
    CHECKF(want && have && json_equal(want, have), "typed XML arguments %s", args);
    json_decref(want);
    json_decref(have);
    CHECK(calls_of(SRV_TOOLFMT_XML, NULL, xml, strlen(xml), true, &n, names, args) == 1);
    want = json_loads("{\"s\": 3, \"n\": 3, \"u\": true}", 0, NULL);
    have = json_loads(args, 0, NULL);
    CHECKF(want && have && json_equal(want, have), "untyped XML arguments %s", args);
    json_decref(want);
    json_decref(have);
    json_decref(tools);
}

/* Streams every case split into pieces of `step` bytes: what may be sent
 * never shrinks, never holds a call's tag or JSON, and content sent plus
 * what the rest gives at the end equals the whole answer's reading. */
static void check_plain(size_t step) {
    for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); i++) {
        const extract_case *c = &k_cases[i];
        const size_t len = strlen(c->text);
        size_t sent = 0;
        for (size_t k = 0;; k += step) {
            if (k > len) k = len;
            const size_t n = srv_tools_plain(c->f, c->text, k);
            CHECKF(n <= k && n >= sent, "case %zu at %zu: %zu after %zu", i, k, n, sent);
            if (n > sent) sent = n;
            if (k == len) break;
        }
        char names[128], args[128];
        size_t n = len - sent;
        const int got =
            calls_of(c->f, NULL, c->text + sent, len - sent, sent == 0, &n, names, args);
        CHECKF(got == c->n_calls, "case %zu streamed by %zu: %d calls", i, step, got);
        const size_t content = sent + (got >= 0 ? n : len - sent);
        const size_t want = c->n_calls >= 0 ? strlen(c->content) : len;
        CHECKF(content == want, "case %zu streamed by %zu: content %zu, not %zu", i, step, content,
               want);
    }
    /* plain text goes out as it comes; a possible call is held */
    CHECK(srv_tools_plain(SRV_TOOLFMT_GENERIC, "Hello", 5) == 5);
    CHECK(srv_tools_plain(SRV_TOOLFMT_GENERIC, "  {", 3) == 0);
    CHECK(srv_tools_plain(SRV_TOOLFMT_GENERIC, "``", 2) == 0);
    CHECK(srv_tools_plain(SRV_TOOLFMT_GENERIC, "```js", 5) == 0);
    CHECK(srv_tools_plain(SRV_TOOLFMT_GENERIC, "```jsx", 6) == 6);
    CHECK(srv_tools_plain(SRV_TOOLFMT_LLAMA3, "<|pyt", 5) == 0);
    CHECK(srv_tools_plain(SRV_TOOLFMT_HERMES, "Hi <tool_", 9) == 2);
    CHECK(srv_tools_plain(SRV_TOOLFMT_HERMES, "Hi <tools", 9) == 9);
    CHECK(srv_tools_plain(SRV_TOOLFMT_HERMES, "Hi there \n", 10) == 8);
    CHECK(srv_tools_plain(SRV_TOOLFMT_MISTRAL, "ok [TOOL", 8) == 2);
    CHECK(srv_tools_plain(SRV_TOOLFMT_GENERIC, "ok [TOOL", 8) == 8);
    CHECK(srv_tools_plain(SRV_TOOLFMT_MISTRAL_ARGS, "get_we", 6) == 0);
    CHECK(srv_tools_plain(SRV_TOOLFMT_MISTRAL_ARGS, "get_weather[AR", 14) == 0);
    CHECK(srv_tools_plain(SRV_TOOLFMT_MISTRAL_ARGS, "Hello there", 11) == 11);
    CHECK(srv_tools_plain(SRV_TOOLFMT_XML, "Hi <tool_", 9) == 2);
}

/* Whether grammar g (root) takes text as a whole sentence. */
static bool takes(const char *g, const char *root, const char *text) {
    cllm_grammar *gr = NULL;
    cllm_grammar_matcher *m = NULL;
    if (cllm_grammar_parse(g, root, &gr) != CLLM_OK ||
        cllm_grammar_matcher_new(gr, &m) != CLLM_OK) {
        fprintf(stderr, "grammar: %s\n%s\n", cllm_last_error(), g);
        cllm_grammar_free(gr);
        return false;
    }
    const bool ok = cllm_grammar_matcher_accept(m, text, strlen(text)) == CLLM_OK &&
                    cllm_grammar_matcher_done(m);
    cllm_grammar_matcher_free(m);
    cllm_grammar_free(gr);
    return ok;
}

static const char k_tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "
    "[\"city\"]}}}, {\"type\": \"function\", \"function\": {\"name\": \"now\"}}]";

typedef struct grammar_case {
    srv_tool_format f;
    const char *choice; /* tool_choice as JSON */
    bool parallel;
    const char *text;
    bool taken;
} grammar_case;

static const grammar_case k_grammars[] = {
    {SRV_TOOLFMT_GENERIC, "\"required\"", true,
     "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}", true},
    {SRV_TOOLFMT_GENERIC, "\"required\"", true,
     "[{\"name\":\"now\",\"arguments\":{}},{\"name\":\"get_weather\",\"arguments\":{\"city\":"
     "\"A\"}}]",
     true},
    {SRV_TOOLFMT_GENERIC, "\"required\"", false, "[{\"name\":\"now\",\"arguments\":{}}]", false},
    {SRV_TOOLFMT_GENERIC, "\"required\"", true, "{\"name\":\"get_weather\",\"arguments\":{}}",
     false},
    {SRV_TOOLFMT_GENERIC, "\"required\"", true, "{\"name\":\"other\",\"arguments\":{}}", false},
    {SRV_TOOLFMT_HERMES, "\"required\"", true,
     "<tool_call>\n{\"name\":\"now\",\"arguments\":{}}\n</tool_call>", true},
    {SRV_TOOLFMT_HERMES, "\"required\"", true,
     "<tool_call>\n{\"name\":\"now\",\"arguments\":{}}\n</tool_call>\n<tool_call>\n{\"name\":"
     "\"now\",\"arguments\":{}}\n</tool_call>",
     true},
    {SRV_TOOLFMT_HERMES, "\"required\"", false,
     "<tool_call>\n{\"name\":\"now\",\"arguments\":{}}\n</tool_call>\n<tool_call>\n{\"name\":"
     "\"now\",\"arguments\":{}}\n</tool_call>",
     false},
    {SRV_TOOLFMT_HERMES, "\"required\"", true, "{\"name\":\"now\",\"arguments\":{}}", false},
    {SRV_TOOLFMT_LLAMA3, "\"required\"", true,
     "{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Rome\"}}", true},
    {SRV_TOOLFMT_LLAMA3, "\"required\"", true, "{\"name\":\"now\",\"arguments\":{}}", false},
    {SRV_TOOLFMT_LLAMA3, "\"required\"", true, "[{\"name\":\"now\",\"parameters\":{}}]", false},
    {SRV_TOOLFMT_MISTRAL, "\"required\"", true,
     "[{\"name\":\"now\",\"arguments\":{}},{\"name\":\"now\",\"arguments\":{}}]", true},
    {SRV_TOOLFMT_MISTRAL, "\"required\"", true, "{\"name\":\"now\",\"arguments\":{}}", false},
    {SRV_TOOLFMT_MISTRAL, "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}", true,
     "[{\"name\":\"now\",\"arguments\":{}},{\"name\":\"now\",\"arguments\":{}}]", false},
    {SRV_TOOLFMT_MISTRAL, "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}", true,
     "[{\"name\":\"now\",\"arguments\":{}}]", true},
    {SRV_TOOLFMT_MISTRAL, "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}", true,
     "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"A\"}}]", false},
    {SRV_TOOLFMT_MISTRAL_ARGS, "\"required\"", true, "get_weather[ARGS]{\"city\":\"Oslo\"}", true},
    {SRV_TOOLFMT_MISTRAL_ARGS, "\"required\"", true,
     "[TOOL_CALLS]now[ARGS]{}[TOOL_CALLS]get_weather[ARGS]{\"city\":\"A\"}", true},
    {SRV_TOOLFMT_MISTRAL_ARGS, "\"required\"", false,
     "[TOOL_CALLS]now[ARGS]{}[TOOL_CALLS]get_weather[ARGS]{\"city\":\"A\"}", false},
    {SRV_TOOLFMT_MISTRAL_ARGS, "\"required\"", true, "get_weather[ARGS]{}", false},
    {SRV_TOOLFMT_MISTRAL_ARGS, "\"required\"", true, "other[ARGS]{}", false},
    {SRV_TOOLFMT_MISTRAL_ARGS, "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}", true,
     "[TOOL_CALLS]now[ARGS]{}", true},
    {SRV_TOOLFMT_MISTRAL_ARGS, "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}", true,
     "get_weather[ARGS]{\"city\":\"A\"}", false},
    {SRV_TOOLFMT_XML, "\"required\"", true,
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew <York>\n</parameter>\n"
     "</function>\n</tool_call>",
     true},
    {SRV_TOOLFMT_XML, "\"required\"", true,
     "<tool_call>\n<function=now>\n</function>\n</tool_call>\n<tool_call>\n<function=now>\n"
     "</function>\n</tool_call>",
     true},
    {SRV_TOOLFMT_XML, "\"required\"", false,
     "<tool_call>\n<function=now>\n</function>\n</tool_call>\n<tool_call>\n<function=now>\n"
     "</function>\n</tool_call>",
     false},
    {SRV_TOOLFMT_XML, "\"required\"", true,
     "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>", false},
    {SRV_TOOLFMT_XML, "\"required\"", true,
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nA</b>\n</parameter>\n"
     "</function>\n</tool_call>",
     false},
    /* tool_choice auto: the lazy grammar, from its trigger on */
    {SRV_TOOLFMT_HERMES, "\"auto\"", true,
     "<tool_call>\n{\"name\":\"now\",\"arguments\":{}}\n</tool_call>", true},
    {SRV_TOOLFMT_MISTRAL, "\"auto\"", true, "[TOOL_CALLS][{\"name\":\"now\",\"arguments\":{}}]",
     true},
    {SRV_TOOLFMT_MISTRAL, "\"auto\"", true, "[{\"name\":\"now\",\"arguments\":{}}]", true},
    {SRV_TOOLFMT_LLAMA3, "\"auto\"", true, "{\"name\":\"now\",\"parameters\":{}}", true},
    {SRV_TOOLFMT_GENERIC, "\"auto\"", true, "[{\"name\":\"now\",\"arguments\":{}}]", true},
    {SRV_TOOLFMT_GENERIC, "\"auto\"", true, "{\"name\":\"other\",\"arguments\":{}}", false},
};

static void check_grammar(void) {
    for (size_t i = 0; i < sizeof(k_grammars) / sizeof(k_grammars[0]); i++) {
        const grammar_case *c = &k_grammars[i];
        char req[1024];
        snprintf(req, sizeof(req),
                 "{\"tools\": %s, \"tool_choice\": %s, \"parallel_tool_calls\": %s}", k_tools,
                 c->choice, c->parallel ? "true" : "false");
        json_t *o = json_loads(req, 0, NULL);
        srv_tools t;
        srv_tool_err te = {0};
        CHECK(o && srv_tools_parse(o, &t, &te) == 0);
        t.format = c->f;
        const char *root = NULL;
        char *g = srv_tools_grammar(&t, &root, &te);
        CHECKF(g && root, "grammar case %zu: %s", i, te.msg);
        if (g && root) {
            CHECKF(takes(g, root, c->text) == c->taken, "grammar case %zu: %s %s", i,
                   c->taken ? "refuses" : "takes", c->text);
        }
        free(g);
        json_decref(o);
    }
}

/* Under tool_choice auto every format's grammar begins with each of its
 * trigger words (the sampler feeds them to it), and a string property of
 * the XML form takes text, another JSON of its schema. */
static void check_lazy(void) {
    for (int f = 0; f < SRV_TOOLFMT_COUNT; f++) {
        for (int par = 0; par < 2; par++) {
            char req[1024];
            snprintf(req, sizeof(req),
                     "{\"tools\": %s, \"tool_choice\": \"auto\", \"parallel_tool_calls\": %s}",
                     k_tools, par ? "true" : "false");
            json_t *o = json_loads(req, 0, NULL);
            srv_tools t;
            srv_tool_err te = {0};
            CHECK(o && srv_tools_parse(o, &t, &te) == 0);
            t.format = (srv_tool_format)f;
            srv_gen_params gp = {0};
            CHECKF(srv_tools_set_grammar(&t, NULL, &gp, &te) == 0, "format %d: %s", f, te.msg);
            const cllm_sampler_params *sp = &gp.rp.sampling;
            CHECKF(gp.grammar && sp->grammar == gp.grammar && sp->n_grammar_triggers >= 1 &&
                       sp->n_grammar_trigger_tokens == 0,
                   "format %d", f);
            cllm_grammar *g = NULL;
            cllm_grammar_matcher *m = NULL;
            if (gp.grammar && cllm_grammar_parse(gp.grammar, sp->grammar_root, &g) == CLLM_OK &&
                cllm_grammar_matcher_new(g, &m) == CLLM_OK) {
                for (int i = 0; i < sp->n_grammar_triggers; i++) {
                    const char *w = sp->grammar_triggers[i];
                    bool ok = false;
                    CHECKF(cllm_grammar_matcher_try(m, w, strlen(w), &ok) == CLLM_OK && ok,
                           "format %d: the grammar does not begin with %s", f, w);
                }
            } else {
                CHECKF(false, "format %d: %s", f, cllm_last_error());
            }
            cllm_grammar_matcher_free(m);
            cllm_grammar_free(g);
            free(gp.grammar);
            free(gp.triggers);
            json_decref(o);
        }
    }
    /* the XML form: a string is text, an integer JSON */
    static const char tools[] =
        "{\"tool_choice\": \"required\", \"tools\": [{\"type\": \"function\", \"function\": "
        "{\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": {\"s\": "
        "{\"type\": \"string\"}, \"n\": {\"type\": \"integer\"}}, \"required\": [\"n\"]}}}]}";
    json_t *o = json_loads(tools, 0, NULL);
    srv_tools t;
    srv_tool_err te = {0};
    CHECK(o && srv_tools_parse(o, &t, &te) == 0);
    t.format = SRV_TOOLFMT_XML;
    const char *root = NULL;
    char *g = srv_tools_grammar(&t, &root, &te);
    CHECKF(g && root, "XML: %s", te.msg);
    if (g && root) {
        CHECK(takes(g, root,
                    "<tool_call>\n<function=f>\n<parameter=s>\n3 > 2\n</parameter>\n"
                    "<parameter=n>\n-12\n</parameter>\n</function>\n</tool_call>"));
        CHECK(takes(g, root,
                    "<tool_call>\n<function=f>\n<parameter=n>\n7\n</parameter>\n</function>\n"
                    "</tool_call>"));
        CHECK(!takes(g, root,
                     "<tool_call>\n<function=f>\n<parameter=n>\nseven\n</parameter>\n"
                     "</function>\n</tool_call>"));
        CHECK(!takes(g, root,
                     "<tool_call>\n<function=f>\n<parameter=s>\nx\n</parameter>\n</function>\n"
                     "</tool_call>"));
    }
    free(g);
    json_decref(o);
}

int main(void) {
    check_format();
    check_lazy();
    check_extract();
    for (size_t step = 1; step <= 7; step++) check_plain(step);
    check_plain(1000);
    check_grammar();
    return check_summary("test_serve_tools");
}
