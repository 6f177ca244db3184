/* Tests of JSON Schema to GBNF: documents accepted and refused under the
 * grammar of each schema, schemas refused with the keyword named, and
 * generation with SmolLM2 under schemas like those Pydantic v2 emits, every
 * output validated by Python's jsonschema (tests/json_schema_check.py).
 *
 *     test_json_schema [PYTHON VENV_DIR OUT.jsonl]
 *
 * Without the arguments the outputs are only parsed as JSON here. */
#include "common/check.h"
#include "common/json.h"
#include "common/refs.h"
#include "text/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static void quiet_log(cllm_log_level level, const char *msg, void *user_data) {
    (void)level;
    (void)msg;
    (void)user_data;
}

/* Whether `doc` is a complete sentence of grammar g. */
static bool accepts(const cllm_grammar *g, const char *doc) {
    cllm_grammar_matcher *m = NULL;
    if (cllm_grammar_matcher_new(g, &m) != CLLM_OK) return false;
    const bool ok =
        cllm_grammar_matcher_accept(m, doc, strlen(doc)) == CLLM_OK && cllm_grammar_matcher_done(m);
    cllm_grammar_matcher_free(m);
    return ok;
}

typedef struct doc_case {
    const char *schema;
    const char *valid[6];
    const char *invalid[8];
} doc_case;

static const doc_case k_docs[] = {
    {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": "
     "\"string\"}, \"c\": {\"type\": \"boolean\"}}, \"required\": [\"b\"]}",
     {"{\"b\": \"x\"}", "{\"a\": -3, \"b\": \"\"}", "{\"b\": \"x\", \"c\": true}",
      "{ \"a\": 0, \"b\": \"\\u00e9\", \"c\": false }"},
     {"{}", "{\"a\": 1}", "{\"b\": 1}", "{\"c\": true, \"b\": \"x\"}", "{\"b\": \"x\",}",
      "{\"b\": \"x\", \"d\": 1}", "{\"a\": 1.5, \"b\": \"x\"}"}},
    {"{\"type\": \"integer\", \"minimum\": -20, \"maximum\": 1234}",
     {"-20", "0", "7", "1234", "999", "-9"},
     {"-21", "1235", "01", "-0", "2000", "12345"}},
    {"{\"type\": \"integer\", \"exclusiveMinimum\": 99}",
     {"100", "5000", "100000"},
     {"99", "0", "-5"}},
    {"{\"type\": \"integer\", \"maximum\": -10}", {"-10", "-11", "-1000"}, {"-9", "0", "5"}},
    {"{\"type\": \"array\", \"items\": {\"enum\": [\"x\", 2, null]}, \"minItems\": 1, "
     "\"maxItems\": 3}",
     {"[\"x\"]", "[2, null, \"x\"]"},
     {"[]", "[\"x\", 2, null, 2]", "[\"y\"]", "[3]"}},
    {"{\"prefixItems\": [{\"type\": \"string\"}, {\"type\": \"number\"}], \"items\": false}",
     {"[]", "[\"a\"]", "[\"a\", 1.5]"},
     {"[1]", "[\"a\", \"b\"]", "[\"a\", 1, 2]"}},
    {"{\"type\": \"string\", \"pattern\": \"^[A-Z]{2}-\\\\d{3}(x|yz)?$\"}",
     {"\"AB-123\"", "\"QQ-000yz\""},
     {"\"AB-12\"", "\"ab-123\"", "\"AB-123y\"", "\"AB-1234\""}},
    {"{\"type\": \"string\", \"pattern\": \"a\\\"b\"}",
     {"\"a\\\"b\"", "\"xxa\\\"byy\""},
     {"\"ab\""}},
    {"{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}",
     {"\"ab\"", "\"\\n\\t\"", "\"abc\""},
     {"\"a\"", "\"abcd\""}},
    {"{\"type\": \"string\", \"format\": \"date-time\"}",
     {"\"2024-02-29T23:59:59Z\"", "\"1999-12-31T00:00:00.5+05:30\""},
     {"\"2024-13-01T00:00:00Z\"", "\"2024-01-01\""}},
    {"{\"type\": \"string\", \"format\": \"uuid\"}",
     {"\"123e4567-e89b-12d3-a456-426614174000\""},
     {"\"123e4567e89b12d3a456426614174000\""}},
    {"{\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"null\"}], \"default\": null, \"title\": "
     "\"X\"}",
     {"\"a\"", "null"},
     {"1", "\"a"}},
    {"{\"type\": [\"number\", \"boolean\"], \"minimum\": 0}",
     {"0.5", "3e2", "true"},
     {"-1", "\"1\""}},
    {"{\"type\": \"object\", \"additionalProperties\": {\"type\": \"integer\"}}",
     {"{}", "{\"any\": 1, \"thing\": -2}"},
     {"{\"a\": \"b\"}"}},
    {"{\"type\": \"object\", \"properties\": {\"a\": {\"const\": 1}}, \"required\": [\"a\"], "
     "\"additionalProperties\": false}",
     {"{\"a\": 1}"},
     {"{\"a\": 1, \"b\": 2}", "{\"a\": 2}"}},
    {"{\"$defs\": {\"Base\": {\"type\": \"object\", \"properties\": {\"id\": {\"type\": "
     "\"integer\"}}, \"required\": [\"id\"]}}, \"allOf\": [{\"$ref\": \"#/$defs/Base\"}, "
     "{\"properties\": {\"ok\": {\"type\": \"boolean\"}}, \"required\": [\"ok\"]}]}",
     {"{\"id\": 1, \"ok\": true}"},
     {"{\"id\": 1}", "{\"ok\": true}"}},
    /* recursion through a definition */
    {"{\"definitions\": {\"T\": {\"type\": \"object\", \"properties\": {\"kids\": {\"type\": "
     "\"array\", \"items\": {\"$ref\": \"#/definitions/T\"}}}, \"required\": [\"kids\"]}}, "
     "\"$ref\": \"#/definitions/T\"}",
     {"{\"kids\": []}", "{\"kids\": [{\"kids\": [{\"kids\": []}]}, {\"kids\": []}]}"},
     {"{\"kids\": [{}]}"}},
    {"{}", {"{\"a\": [1, {}]}", "\"s\"", "12"}, {"{\"a\" 1}"}},
};

static void test_documents(void) {
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(k_docs); i++) {
        const doc_case *dc = &k_docs[i];
        char *gbnf = NULL;
        cllm_grammar *g = NULL;
        if (cllm_json_schema_to_grammar(dc->schema, &gbnf) != CLLM_OK ||
            cllm_grammar_parse(gbnf, NULL, &g) != CLLM_OK) {
            CHECKF(false, "schema %zu: %s", i, cllm_last_error());
            free(gbnf);
            continue;
        }
        for (size_t k = 0; k < CLLM_ARRAY_SIZE(dc->valid) && dc->valid[k]; k++) {
            CHECKF(accepts(g, dc->valid[k]), "schema %zu refuses %s", i, dc->valid[k]);
        }
        for (size_t k = 0; k < CLLM_ARRAY_SIZE(dc->invalid) && dc->invalid[k]; k++) {
            CHECKF(!accepts(g, dc->invalid[k]), "schema %zu accepts %s", i, dc->invalid[k]);
        }
        cllm_grammar_free(g);
        free(gbnf);
    }
}

typedef struct refused_case {
    const char *schema;
    cllm_status status;
    const char *needle; /* in the message: the keyword or value named */
} refused_case;

static const refused_case k_refused[] = {
    {"{\"type\": \"string\", \"format\": \"email\"}", CLLM_ERR_UNSUPPORTED, "'format' \"email\""},
    {"{\"not\": {\"type\": \"null\"}}", CLLM_ERR_UNSUPPORTED, "keyword 'not'"},
    {"{\"type\": \"object\", \"patternProperties\": {\"^a\": {}}}", CLLM_ERR_UNSUPPORTED,
     "keyword 'patternProperties'"},
    {"{\"if\": {\"type\": \"string\"}, \"then\": {}}", CLLM_ERR_UNSUPPORTED, "keyword 'if'"},
    {"{\"type\": \"array\", \"uniqueItems\": true}", CLLM_ERR_UNSUPPORTED, "keyword 'uniqueItems'"},
    {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"object\", \"minProperties\": "
     "1}}}",
     CLLM_ERR_UNSUPPORTED, "#/properties/a: keyword 'minProperties'"},
    {"{\"type\": \"string\", \"pattern\": \"(?=a)b\"}", CLLM_ERR_UNSUPPORTED, "look-around"},
    {"{\"type\": \"string\", \"pattern\": \"a\\\\1\"}", CLLM_ERR_UNSUPPORTED, "'pattern'"},
    {"{\"type\": \"string\", \"pattern\": \"a^b\"}", CLLM_ERR_UNSUPPORTED, "anchor"},
    {"{\"type\": \"number\", \"maximum\": 3.5}", CLLM_ERR_UNSUPPORTED, "'maximum' on a number"},
    {"{\"$ref\": \"https://example.com/s.json\"}", CLLM_ERR_UNSUPPORTED, "'$ref'"},
    {"{\"$ref\": \"#/$defs/Missing\"}", CLLM_ERR_FORMAT, "names no definition"},
    {"{\"type\": \"strnig\"}", CLLM_ERR_FORMAT, "unknown type \"strnig\""},
    {"{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 4}", CLLM_ERR_FORMAT, "is empty"},
    {"{\"type\": \"object\",}", CLLM_ERR_FORMAT, "not JSON at byte 18"},
    {"{\"allOf\": [{\"type\": \"string\"}, {\"type\": \"integer\"}]}", CLLM_ERR_UNSUPPORTED,
     "'type' differs"},
    {"{\"anyOf\": [{\"type\": \"string\"}], \"minLength\": 2}", CLLM_ERR_UNSUPPORTED,
     "'anyOf' beside other keywords"},
    {"false", CLLM_ERR_UNSUPPORTED, "nothing is valid"},
};

static void test_refused(void) {
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(k_refused); i++) {
        char *gbnf = NULL;
        const cllm_status st = cllm_json_schema_to_grammar(k_refused[i].schema, &gbnf);
        CHECKF(st == k_refused[i].status && gbnf == NULL, "refused %zu: status %d", i, (int)st);
        CHECKF(strstr(cllm_last_error(), k_refused[i].needle) != NULL,
               "refused %zu: \"%s\" lacks \"%s\"", i, cllm_last_error(), k_refused[i].needle);
        free(gbnf);
    }
}

/* Schemas as Pydantic v2 writes them (model_json_schema()), the kind the
 * OpenAI SDK and LangChain send. */
static const char *const k_corpus[][2] = {
    {"person",
     "{\"properties\": {\"name\": {\"title\": \"Name\", \"type\": \"string\", \"maxLength\": 40}, "
     "\"age\": {\"title\": \"Age\", \"type\": \"integer\", \"minimum\": 0, \"maximum\": 130}, "
     "\"email\": {\"anyOf\": [{\"type\": \"string\", \"maxLength\": 40}, {\"type\": \"null\"}], "
     "\"default\": null, \"title\": \"Email\"}}, \"required\": [\"name\", \"age\"], \"title\": "
     "\"Person\", \"type\": \"object\"}"},
    {"customer",
     "{\"$defs\": {\"Address\": {\"properties\": {\"street\": {\"title\": \"Street\", \"type\": "
     "\"string\", \"maxLength\": 40}, \"city\": {\"title\": \"City\", \"type\": \"string\", "
     "\"maxLength\": 30}, \"zip\": {\"pattern\": \"^[0-9]{5}$\", \"title\": \"Zip\", \"type\": "
     "\"string\"}}, \"required\": [\"street\", \"city\", \"zip\"], \"title\": \"Address\", "
     "\"type\": \"object\"}}, \"properties\": {\"name\": {\"title\": \"Name\", \"type\": "
     "\"string\", \"maxLength\": 40}, \"address\": {\"$ref\": \"#/$defs/Address\"}, \"tags\": "
     "{\"items\": {\"type\": \"string\", \"maxLength\": 20}, \"maxItems\": 3, \"title\": "
     "\"Tags\", \"type\": \"array\"}}, \"required\": [\"name\", \"address\", \"tags\"], "
     "\"title\": \"Customer\", \"type\": \"object\"}"},
    {"item",
     "{\"$defs\": {\"Color\": {\"enum\": [\"red\", \"green\", \"blue\"], \"title\": \"Color\", "
     "\"type\": \"string\"}}, \"properties\": {\"color\": {\"$ref\": \"#/$defs/Color\"}, "
     "\"kind\": {\"const\": \"pet\", \"title\": \"Kind\", \"type\": \"string\"}, \"size\": "
     "{\"enum\": [\"S\", \"M\", \"L\"], \"title\": \"Size\", \"type\": \"string\"}, \"price\": "
     "{\"title\": \"Price\", \"type\": \"number\", \"minimum\": 0}}, \"required\": [\"color\", "
     "\"kind\", \"size\", \"price\"], \"title\": \"Item\", \"type\": \"object\"}"},
    {"math_reasoning",
     "{\"$defs\": {\"Step\": {\"additionalProperties\": false, \"properties\": {\"explanation\": "
     "{\"title\": \"Explanation\", \"type\": \"string\", \"maxLength\": 60}, \"output\": "
     "{\"title\": \"Output\", \"type\": \"string\", \"maxLength\": 20}}, \"required\": "
     "[\"explanation\", \"output\"], \"title\": \"Step\", \"type\": \"object\"}}, "
     "\"additionalProperties\": false, \"properties\": {\"steps\": {\"items\": {\"$ref\": "
     "\"#/$defs/Step\"}, \"title\": \"Steps\", \"type\": \"array\", \"maxItems\": 3}, "
     "\"final_answer\": {\"title\": \"Final Answer\", \"type\": \"string\", \"maxLength\": 20}}, "
     "\"required\": [\"steps\", \"final_answer\"], \"title\": \"MathReasoning\", \"type\": "
     "\"object\"}"},
    {"event",
     "{\"properties\": {\"id\": {\"format\": \"uuid\", \"title\": \"Id\", \"type\": \"string\"}, "
     "\"day\": {\"format\": \"date\", \"title\": \"Day\", \"type\": \"string\"}, \"at\": "
     "{\"format\": \"date-time\", \"title\": \"At\", \"type\": \"string\"}, \"rating\": "
     "{\"maximum\": 5, \"minimum\": 1, \"title\": \"Rating\", \"type\": \"integer\"}, "
     "\"public\": {\"title\": \"Public\", \"type\": \"boolean\"}, \"note\": {\"anyOf\": "
     "[{\"maxLength\": 30, \"type\": \"string\"}, {\"type\": \"null\"}], \"title\": \"Note\"}}, "
     "\"required\": [\"id\", \"day\", \"at\", \"rating\", \"public\", \"note\"], \"title\": "
     "\"Event\", \"type\": \"object\"}"},
    {"shapes",
     "{\"$defs\": {\"Circle\": {\"properties\": {\"kind\": {\"const\": \"circle\", \"title\": "
     "\"Kind\", \"type\": \"string\"}, \"radius\": {\"title\": \"Radius\", \"type\": "
     "\"number\"}}, \"required\": [\"kind\", \"radius\"], \"title\": \"Circle\", \"type\": "
     "\"object\"}, \"Rect\": {\"properties\": {\"kind\": {\"const\": \"rect\", \"title\": "
     "\"Kind\", \"type\": \"string\"}, \"w\": {\"title\": \"W\", \"type\": \"integer\", "
     "\"minimum\": 0}, \"h\": {\"title\": \"H\", \"type\": \"integer\", \"minimum\": 0}}, "
     "\"required\": [\"kind\", \"w\", \"h\"], \"title\": \"Rect\", \"type\": \"object\"}}, "
     "\"properties\": {\"shapes\": {\"items\": {\"anyOf\": [{\"$ref\": \"#/$defs/Circle\"}, "
     "{\"$ref\": \"#/$defs/Rect\"}]}, \"maxItems\": 3, \"minItems\": 1, \"title\": \"Shapes\", "
     "\"type\": \"array\"}, \"counts\": {\"additionalProperties\": {\"type\": \"integer\"}, "
     "\"title\": \"Counts\", \"type\": \"object\"}}, \"required\": [\"shapes\"], \"title\": "
     "\"Drawing\", \"type\": \"object\"}"},
};

/* The JSON string of s[0, n) into f. */
static void put_json_string(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            fprintf(f, "\\%c", c);
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", c);
        } else {
            fputc(c, f);
        }
    }
    fputc('"', f);
}

/* Generates under each corpus schema for a few seeds; each output goes to
 * `cases` (JSON lines) and must parse as JSON here. */
static void test_generation(const cllm_model *m, FILE *cases) {
    const int n_seeds = CHECK_SANITIZED ? 1 : 2;
    cllm_session_params ssp = cllm_session_default_params();
    ssp.n_ctx = 2048;
    cllm_session *s = NULL;
    if (cllm_session_new(m, &ssp, &s) != CLLM_OK) {
        CHECKF(false, "session: %s", cllm_last_error());
        return;
    }
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(k_corpus); i++) {
        char *gbnf = NULL;
        if (cllm_json_schema_to_grammar(k_corpus[i][1], &gbnf) != CLLM_OK) {
            CHECKF(false, "%s: %s", k_corpus[i][0], cllm_last_error());
            continue;
        }
        char question[4096];
        snprintf(question, sizeof(question),
                 "Write one example as JSON that follows this JSON Schema:\n%s", k_corpus[i][1]);
        cllm_chat_msg msg = {"user", question};
        char *prompt = NULL;
        cllm_chat_style style;
        int32_t ids[2048];
        size_t n = 0;
        if (cllm_chat_apply(m, NULL, &msg, 1, true, &prompt, NULL, &style) != CLLM_OK ||
            cllm_tokenize(m, prompt, strlen(prompt), !cllm_chat_style_has_bos_text(style), true,
                          ids, CLLM_ARRAY_SIZE(ids), &n) != CLLM_OK) {
            CHECKF(false, "%s: prompt: %s", k_corpus[i][0], cllm_last_error());
            free(prompt);
            free(gbnf);
            continue;
        }
        free(prompt);
        for (int seed = 0; seed < n_seeds; seed++) {
            cllm_sampler_params sp = cllm_sampler_default_params();
            sp.temperature = seed == 0 ? 0.0f : 0.7f;
            sp.seed = (uint64_t)seed;
            sp.grammar = gbnf;
            cllm_sampler *smp = NULL;
            cllm_generate_result res = {0};
            char out[8192];
            size_t len = 0;
            (void)cllm_session_truncate(s, 0);
            if (cllm_sampler_new_model(&sp, m, &smp) != CLLM_OK ||
                cllm_generate(s, smp, ids, n, 400, NULL, NULL, &res) != CLLM_OK ||
                cllm_detokenize(m, res.ids, res.n_ids, 0, out, sizeof(out) - 1, &len) != CLLM_OK) {
                CHECKF(false, "%s seed %d: %s", k_corpus[i][0], seed, cllm_last_error());
            } else {
                out[len] = '\0';
                if (getenv("TEST_JSON_SCHEMA_SHOW")) {
                    fprintf(stderr, "%s seed %d: %s\n", k_corpus[i][0], seed, out);
                }
                json *doc = json_parse(out);
                CHECKF(res.stop == CLLM_STOP_EOG && doc, "%s seed %d: stop %d, output %s",
                       k_corpus[i][0], seed, (int)res.stop, out);
                json_free(doc);
                if (cases) {
                    fprintf(cases, "{\"name\": \"%s seed %d\", \"schema\": %s, \"output\": ",
                            k_corpus[i][0], seed, k_corpus[i][1]);
                    put_json_string(cases, out, len);
                    fputs("}\n", cases);
                }
            }
            cllm_generate_result_free(&res);
            cllm_sampler_free(smp);
        }
        free(gbnf);
    }
    cllm_session_free(s);
}

int main(int argc, char **argv) {
    cllm_log_set(quiet_log, NULL);
    test_documents();
    test_refused();
    char path[4096];
    if (refs_fetch_model("smollm2", path, sizeof(path))) {
        cllm_model *m = NULL;
        FILE *cases = argc >= 4 ? fopen(argv[3], "w") : NULL;
        if (argc >= 4) CHECKF(cases != NULL, "cannot write %s", argv[3]);
        if (cllm_model_load(path, NULL, &m) != CLLM_OK) {
            CHECKF(false, "load %s: %s", path, cllm_last_error());
        } else {
            test_generation(m, cases);
        }
        cllm_model_free(m);
        if (cases) {
            fclose(cases);
            /* every output against its schema, with jsonschema in a venv */
            char cmd[12288];
            snprintf(cmd, sizeof(cmd), "'%s' '%s/tests/json_schema_check.py' '%s' '%s'", argv[1],
                     getenv("CLLM_SOURCE_DIR") ? getenv("CLLM_SOURCE_DIR") : ".", argv[2], argv[3]);
            const int rc = system(cmd);
            const int code = rc >= 0 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
            if (code == CHECK_SKIP) {
                check_missing("python3 -m venv with pip install jsonschema");
            } else {
                CHECKF(code == 0, "json_schema_check.py exited with %d", code);
            }
        }
    }
    return check_summary("test_json_schema");
}
