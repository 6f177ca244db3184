/* Tests of GBNF grammars: the parser (good grammars, errors and their
 * positions), the matcher on strings, the trie mask against a token by
 * token check, and the sampler's grammar stage on real models. */
#include "common/check.h"
#include "common/json.h"
#include "common/refs.h"
#include "runtime/model.h"
#include "text/grammar.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void quiet_log(cllm_log_level level, const char *msg, void *user_data) {
    (void)level;
    (void)msg;
    (void)user_data;
}

/* Whether `text` is a complete sentence (full), or only a prefix of one
 * (prefix), or neither, under grammar g. */
enum { NO = 0, PREFIX = 1, FULL = 2 };

static int classify(const cllm_grammar *g, const char *text) {
    cllm_grammar_matcher *m = NULL;
    if (cllm_grammar_matcher_new(g, &m) != CLLM_OK) return -1;
    const cllm_status st = cllm_grammar_matcher_accept(m, text, strlen(text));
    int r = st != CLLM_OK ? NO : cllm_grammar_matcher_done(m) ? FULL : PREFIX;
    cllm_grammar_matcher_free(m);
    return r;
}

typedef struct str_case {
    const char *text;
    int want;
} str_case;

typedef struct grammar_case {
    const char *gbnf;
    str_case cases[12];
} grammar_case;

static const grammar_case k_good[] = {
    {"root ::= \"yes\" | \"no\"",
     {{"yes", FULL}, {"no", FULL}, {"ye", PREFIX}, {"", PREFIX}, {"yess", NO}, {"n o", NO}}},
    /* comments, line breaks, groups, the next rule starting after a body */
    {"# a comment\nroot ::= greeting ( \" \" name )? # trailing\n"
     "greeting ::= \"hi\"\n  | \"hello\"\nname ::= [A-Z] [a-z]*\n",
     {{"hi", FULL}, {"hello Bob", FULL}, {"hi B", FULL}, {"hi ", PREFIX}, {"hi b", NO}}},
    /* repetitions */
    {"root ::= \"a\"{2} \"b\"{1,3} \"c\"{2,} \"d\"+ \"e\"* \"f\"?",
     {{"aabccd", FULL},
      {"aabbbccccddeeef", FULL},
      {"abccd", NO},
      {"aabbbbccd", NO},
      {"aabcd", NO},
      {"aabcc", PREFIX},
      {"aabccdff", NO}}},
    {"root ::= ( \"ab\" | \"c\" ){0,2} \"!\"",
     {{"!", FULL}, {"ab!", FULL}, {"cab!", FULL}, {"ccc!", NO}, {"a!", NO}}},
    /* classes, negation, escapes */
    {"root ::= [a-cx\\-] [^0-9\\n]",
     {{"a!", FULL}, {"-z", FULL}, {"d!", NO}, {"b5", NO}, {"b\n", NO}}},
    {"root ::= \"\\x41\\u00e9\\t\\\"\\\\\" [\\x30-\\x39]",
     {{"A\xc3\xa9\t\"\\7", FULL}, {"A\xc3\xa9\t\"\\x", NO}}},
    /* UTF-8: literal characters, ranges across encoding lengths, any char */
    {"root ::= [\xce\xb1-\xcf\x89]+ \"\xe2\x82\xac\" .",
     {{"\xce\xb1\xce\xb2\xe2\x82\xac\xf0\x9f\x98\x80", FULL},
      {"\xce\xb1\xe2\x82\xac\x7f", FULL},
      {"\xce\xb1\xe2\x82\xac\xf0\x9f", PREFIX},
      {"\xce\xb1\xe2\x82", PREFIX},
      {"a\xe2\x82\xac!", NO},
      {"\xce\xb1\xe2\x82\xac\xed\xa0\x80", NO}, /* a surrogate is not a character */
      {"\xce\xb1\xe2\x82\xac\xc0\x80", NO}}},   /* nor an overlong encoding */
    {"root ::= [^a] [\\u0100-\\U0010FFFF]",
     {{"b\xc4\x80", FULL},
      {"\xe4\xb8\xad\xf4\x8f\xbf\xbf", FULL},
      {"bz", NO},
      {"a\xc4\x80", NO},
      {"\xf4\x90\x80\x80\xc4\x80", NO}}},
    /* right recursion and nesting */
    {"root ::= list\nlist ::= \"(\" item* \")\"\nitem ::= [0-9] | list",
     {{"()", FULL}, {"(1(2(3))())", FULL}, {"(1(2", PREFIX}, {"(1))", NO}}},
    /* rules that can match nothing */
    {"root ::= opt opt \"x\"\nopt ::= \"a\" | ",
     {{"x", FULL}, {"ax", FULL}, {"aax", FULL}, {"aaax", NO}}},
    /* an empty grammar body matches the empty text only */
    {"root ::= \"\"", {{"", FULL}, {"a", NO}}},
};

static void test_good(void) {
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(k_good); i++) {
        const grammar_case *gc = &k_good[i];
        cllm_grammar *g = NULL;
        const cllm_status st = cllm_grammar_parse(gc->gbnf, NULL, &g);
        CHECKF(st == CLLM_OK, "grammar %zu: %s", i, cllm_last_error());
        if (st != CLLM_OK) continue;
        for (size_t k = 0; k < CLLM_ARRAY_SIZE(gc->cases) && gc->cases[k].text; k++) {
            const int got = classify(g, gc->cases[k].text);
            CHECKF(got == gc->cases[k].want, "grammar %zu, text \"%s\": got %d, want %d", i,
                   gc->cases[k].text, got, gc->cases[k].want);
        }
        cllm_grammar_free(g);
    }
}

typedef struct bad_case {
    const char *gbnf;
    cllm_status status;
    const char *where; /* a substring of the message: the position */
    const char *what;  /* and another: what was expected */
} bad_case;

static const bad_case k_bad[] = {
    {"", CLLM_ERR_FORMAT, "line 1, column 1", "expected a rule"},
    {"root = \"a\"", CLLM_ERR_FORMAT, "line 1, column 6", "'::='"},
    {"root ::= \"a", CLLM_ERR_FORMAT, "line 1, column 12", "'\"' to close"},
    {"root ::= \"a\"\n  x ::= [a-", CLLM_ERR_FORMAT, "line 2, column 12", "']' to close"},
    {"root ::= ( \"a\" | \"b\"", CLLM_ERR_FORMAT, "line 1, column 21", "')' to close"},
    {"root ::= \"a\" )", CLLM_ERR_FORMAT, "line 1, column 14", "'(' missing"},
    {"root ::= \"\\q\"", CLLM_ERR_FORMAT, "line 1, column 12", "an escape"},
    {"root ::= \"\\xZ1\"", CLLM_ERR_FORMAT, "line 1, column 13", "hexadecimal digit"},
    {"root ::= [z-a]", CLLM_ERR_FORMAT, "line 1, column 11", "end is not below its start"},
    {"root ::= \"a\"{3,2}", CLLM_ERR_FORMAT, "line 1, column 13", "m <= n"},
    {"root ::= \"a\"{2", CLLM_ERR_FORMAT, "line 1, column 15", "'}'"},
    {"root ::= \"a\" *+", CLLM_ERR_FORMAT, "line 1, column 15", "expected a rule name"},
    {"root ::= \"a\" @", CLLM_ERR_FORMAT, "line 1, column 14", "expected a rule name"},
    {"root ::= \"a\"{20000}", CLLM_ERR_TOO_LARGE, "repetition count", "10000"},
    {"root ::= thing\n", CLLM_ERR_FORMAT, "line 1, column 10", "'thing' is used but not defined"},
    {"root ::= \"a\"\nroot ::= \"b\"", CLLM_ERR_FORMAT, "line 2, column 1", "defined twice"},
    {"start ::= \"a\"", CLLM_ERR_FORMAT, "no rule named 'root'", "start rule"},
    {"root ::= root \"a\" | \"b\"", CLLM_ERR_FORMAT, "'root' is left-recursive", "reach itself"},
    {"root ::= x\nx ::= y? x \"a\" | \"b\"\ny ::= \"c\"", CLLM_ERR_FORMAT, "'x' is left-recursive",
     "reach itself"},
    {"root ::= ( \"a\"? )*", CLLM_ERR_FORMAT, "'root' is left-recursive", "repetition"},
    {"root ::= [^\\x00-\\U0010FFFF]", CLLM_ERR_FORMAT, "line 1, column 10", "matches some"},
    {"root ::= \"\xff\"", CLLM_ERR_FORMAT, "line 1, column 11", "valid UTF-8"},
};

static void test_bad(void) {
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(k_bad); i++) {
        const bad_case *bc = &k_bad[i];
        cllm_grammar *g = NULL;
        const cllm_status st = cllm_grammar_parse(bc->gbnf, NULL, &g);
        const char *msg = cllm_last_error();
        CHECKF(st == bc->status && g == NULL, "bad grammar %zu: status %d", i, (int)st);
        CHECKF(strstr(msg, bc->where) && strstr(msg, bc->what),
               "bad grammar %zu: message \"%s\" lacks \"%s\" or \"%s\"", i, msg, bc->where,
               bc->what);
        cllm_grammar_free(g);
    }
    /* another start rule */
    cllm_grammar *g = NULL;
    CHECK(cllm_grammar_parse("a ::= \"x\"\nb ::= a a", "b", &g) == CLLM_OK);
    CHECK(g && classify(g, "xx") == FULL && classify(g, "x") == PREFIX);
    cllm_grammar_free(g);
}

/* Ambiguity that doubles the stacks at every byte is stopped at the cap,
 * and the matcher is unchanged after the failure. */
static void test_limits(void) {
    cllm_grammar *g = NULL;
    CHECK(cllm_grammar_parse("root ::= \"a\" root \"b\" | \"a\" root \"c\" | \"\"", NULL, &g) ==
          CLLM_OK);
    if (!g) return;
    cllm_grammar_matcher *m = NULL;
    CHECK(cllm_grammar_matcher_new(g, &m) == CLLM_OK);
    if (m) {
        CHECK(cllm_grammar_matcher_accept(m, "aaaa", 4) == CLLM_OK);
        char many[64];
        memset(many, 'a', sizeof(many));
        CHECK(cllm_grammar_matcher_accept(m, many, sizeof(many)) == CLLM_ERR_TOO_LARGE);
        CHECK(strstr(cllm_last_error(), "parse stacks") != NULL);
        CHECK(cllm_grammar_matcher_accept(m, "bcbc", 4) == CLLM_OK && cllm_grammar_matcher_done(m));
        cllm_grammar_matcher_reset(m);
        CHECK(!cllm_grammar_matcher_done(m) || true);
        bool ok = false;
        CHECK(cllm_grammar_matcher_try(m, "ab", 2, &ok) == CLLM_OK && ok);
        CHECK(cllm_grammar_matcher_try(m, "abb", 3, &ok) == CLLM_OK && !ok);
    }
    cllm_grammar_matcher_free(m);
    cllm_grammar_free(g);
}

/* The JSON grammar on valid and invalid documents. */
static void test_json_grammar(void) {
    cllm_grammar *g = NULL, *gv = NULL;
    CHECK(cllm_grammar_parse(cllm_json_grammar(), NULL, &g) == CLLM_OK);
    CHECK(cllm_grammar_parse(cllm_json_grammar(), "value", &gv) == CLLM_OK);
    if (!g || !gv) return;
    static const str_case objects[] = {
        {"{}", FULL},
        {"{\"a\": 1, \"b\": [true, false, null, -0.5e+3, \"x\\n\\u00e9\"]}", FULL},
        {"{\n  \"a\": {\"b\": {}}\n}", FULL},
        {"{\"a\": 01}", NO},
        {"{\"a\" 1}", NO},
        {"{\"a\": [1,]}", NO},
        {"{\"a\": \"\x01\"}", NO},
        {"[1]", NO},
        {"{\"a\": 1", PREFIX},
    };
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(objects); i++) {
        CHECKF(classify(g, objects[i].text) == objects[i].want, "json %s", objects[i].text);
    }
    CHECK(classify(gv, "[1, \"a\"]") == FULL && classify(gv, "-12") == FULL);
    CHECK(classify(gv, "\"unterminated") == PREFIX && classify(gv, "tru") == PREFIX);
    cllm_grammar_free(g);
    cllm_grammar_free(gv);
}

/* The trie mask equals a token-by-token check, along a text of the grammar
 * (the states between its tokens). */
static void check_mask(const cllm_tokenizer *tok, const char *gbnf, const char *text) {
    cllm_grammar *g = NULL;
    cllm_grammar_vocab *v = NULL;
    cllm_grammar_matcher *m = NULL;
    if (cllm_grammar_parse(gbnf, NULL, &g) != CLLM_OK ||
        cllm_grammar_vocab_new(tok, &v) != CLLM_OK || cllm_grammar_matcher_new(g, &m) != CLLM_OK) {
        CHECKF(false, "check_mask: %s", cllm_last_error());
        goto done;
    }
    const int32_t n = cllm_tokenizer_n_vocab(tok);
    uint8_t *mask = calloc(((size_t)n + 7) / 8, 1);
    const size_t len = strlen(text);
    int bad = 0, states = 0;
    for (size_t pos = 0; pos <= len; pos += 1 + pos % 3) {
        int32_t n_allowed = -1, want = 0;
        CHECK(cllm_grammar_matcher_mask(m, v, mask, &n_allowed) == CLLM_OK);
        for (int32_t id = 0; id < n; id++) {
            size_t pl;
            const char *piece = cllm_grammar_vocab_piece(v, id, &pl);
            bool ok = false;
            if (pl > 0 && cllm_grammar_matcher_try(m, piece, pl, &ok) != CLLM_OK) bad++;
            want += ok;
            if (ok != (bool)((mask[id >> 3] >> (id & 7)) & 1)) bad++;
        }
        CHECKF(n_allowed == want, "mask count %d, want %d", n_allowed, want);
        states++;
        const size_t step = pos + 1 + pos % 3 <= len ? 1 + pos % 3 : len - pos;
        if (step == 0) break;
        CHECK(cllm_grammar_matcher_accept(m, text + pos, step) == CLLM_OK);
    }
    CHECKF(bad == 0, "%d tokens differ between the mask and the check over %d states", bad, states);
    free(mask);
done:
    cllm_grammar_matcher_free(m);
    cllm_grammar_vocab_free(v);
    cllm_grammar_free(g);
}

static void test_masks(const cllm_model *model) {
    const cllm_tokenizer *tok = model->tok;
    check_mask(tok, cllm_json_grammar(),
               "{\"name\": \"Caf\xc3\xa9 \\\"x\\\"\", \"n\": [1.5, -2e3, true],\n  \"o\": {}}");
    check_mask(tok, "root ::= [\xce\xb1-\xcf\x89 ]+ \"!\"", "\xce\xb1\xce\xb2 \xce\xb3!");
    check_mask(tok, "root ::= \"yes\" | \"no\"", "yes");
}

/* Greedy and seeded generation under `gbnf` with a chat prompt; the text
 * (NUL-terminated) into out. Returns the stop reason, or -1 on failure. */
static int generate(const cllm_model *m, const char *gbnf, const char *question, float temp,
                    uint64_t seed, int max_tokens, char *out, size_t cap) {
    out[0] = '\0';
    cllm_chat_msg msg = {"user", question};
    char *prompt = NULL;
    cllm_chat_style style;
    int32_t ids[1024];
    size_t n = 0;
    int reason = -1;
    cllm_session *s = NULL;
    cllm_sampler *smp = NULL;
    cllm_generate_result res = {0};
    cllm_sampler_params sp = cllm_sampler_default_params();
    sp.temperature = temp;
    sp.seed = seed;
    sp.grammar = gbnf;
    cllm_session_params ssp = cllm_session_default_params();
    ssp.n_ctx = 1024;
    if (cllm_chat_apply(m, NULL, &msg, 1, true, &prompt, NULL, &style) != CLLM_OK ||
        cllm_tokenize(m, prompt, strlen(prompt), !cllm_chat_style_has_bos_text(style), true, ids,
                      CLLM_ARRAY_SIZE(ids), &n) != CLLM_OK ||
        cllm_session_new(m, &ssp, &s) != CLLM_OK ||
        cllm_sampler_new_model(&sp, m, &smp) != CLLM_OK ||
        cllm_generate(s, smp, ids, n, max_tokens, NULL, NULL, &res) != CLLM_OK) {
        CHECKF(false, "generate: %s", cllm_last_error());
        goto done;
    }
    size_t len = 0;
    if (cllm_detokenize(m, res.ids, res.n_ids, 0, out, cap - 1, &len) != CLLM_OK) len = 0;
    out[len < cap ? len : cap - 1] = '\0';
    reason = (int)res.stop;
done:
    cllm_generate_result_free(&res);
    cllm_sampler_free(smp);
    cllm_session_free(s);
    free(prompt);
    return reason;
}

static void test_generation(const cllm_model *m) {
    char out[4096];
    for (int seed = 0; seed < 4; seed++) {
        const int r = generate(m, "root ::= \"yes\" | \"no\"", "Is the sky blue? Answer yes or no.",
                               seed == 0 ? 0.0f : 1.0f, (uint64_t)seed, 16, out, sizeof(out));
        CHECKF(r == CLLM_STOP_EOG && (!strcmp(out, "yes") || !strcmp(out, "no")),
               "seed %d: \"%s\" (stop %d)", seed, out, r);
    }
    /* JSON objects for several seeds, parsed by the tests' reader. The
     * generic JSON grammar bounds no string: a sampled answer may go on
     * describing until max_tokens (which seed does differs with the CPU's
     * kernels), so every answer that ended must be an object, and
     * at least half must end */
    const int n_seeds = CHECK_SANITIZED ? 2 : 5;
    int n_ended = 0;
    for (int seed = 0; seed < n_seeds; seed++) {
        const int r = generate(m, cllm_json_grammar(),
                               "Describe a cat as a JSON object with its name, age and colour.",
                               seed == 0 ? 0.0f : 0.8f, (uint64_t)seed, 200, out, sizeof(out));
        if (getenv("TEST_GRAMMAR_SHOW")) fprintf(stderr, "seed %d: %s\n", seed, out);
        CHECKF(r == CLLM_STOP_EOG || r == CLLM_STOP_LENGTH, "seed %d: stop %d", seed, r);
        if (r != CLLM_STOP_EOG) continue;
        n_ended++;
        json *doc = json_parse(out);
        CHECKF(doc && doc->kind == JSON_OBJ, "seed %d: not a JSON object: %s", seed, out);
        json_free(doc);
    }
    CHECKF(n_ended * 2 >= n_seeds, "%d of %d answers ended within 200 tokens", n_ended, n_seeds);
    /* a grammar error comes back from the sampler, with the position */
    cllm_sampler_params sp = cllm_sampler_default_params();
    sp.grammar = "root ::= \"a\" | (";
    cllm_sampler *smp = NULL;
    CHECK(cllm_sampler_new_model(&sp, m, &smp) == CLLM_ERR_FORMAT && smp == NULL);
    CHECK(strstr(cllm_last_error(), "line 1, column 17") != NULL);
    CHECK(cllm_sampler_params_check(&sp, cllm_model_n_vocab(m)) == CLLM_ERR_FORMAT);
    CHECK(cllm_sampler_new(&sp, cllm_model_n_vocab(m), &smp) == CLLM_ERR_INVALID_ARG);
    /* accept refuses what the grammar does not allow, and changes nothing */
    sp.grammar = "root ::= \"yes\" | \"no\"";
    sp.temperature = 0;
    CHECK(cllm_sampler_new_model(&sp, m, &smp) == CLLM_OK);
    if (smp) {
        int32_t y[4], no[4];
        size_t ny = 0, nn = 0;
        CHECK(cllm_tokenize(m, "yes", 3, false, false, y, 4, &ny) == CLLM_OK && ny >= 1);
        CHECK(cllm_tokenize(m, "no", 2, false, false, no, 4, &nn) == CLLM_OK && nn >= 1);
        CHECK(cllm_sampler_accept(smp, no[0]) == CLLM_OK);
        CHECK(cllm_sampler_accept(smp, y[0]) == CLLM_ERR_INVALID_ARG);
        /* only end tokens are left, whatever the logits */
        const int64_t nv = cllm_model_n_vocab(m);
        float *logits = calloc((size_t)nv, sizeof(float));
        logits[y[0]] = 100.0f;
        int32_t id = -1;
        CHECK(nn == 1 && cllm_sampler_sample(smp, logits, &id) == CLLM_OK &&
              cllm_token_is_eog(m, id));
        cllm_sampler_reset(smp);
        CHECK(cllm_sampler_sample(smp, logits, &id) == CLLM_OK && id == y[0]);
        free(logits);
    }
    cllm_sampler_free(smp);
}

/* The first of `words` that is one token of m: its id, the word in *which;
 * -1 when none is. */
static int32_t one_token(const cllm_model *m, const char *const *words, size_t n,
                         const char **which) {
    for (size_t i = 0; i < n; i++) {
        int32_t ids[8];
        size_t k = 0;
        if (cllm_tokenize(m, words[i], strlen(words[i]), false, false, ids, 8, &k) == CLLM_OK &&
            k == 1) {
            *which = words[i];
            return ids[0];
        }
    }
    return -1;
}

/* Accepts the tokens of `text`; false when one is refused. */
static bool accept_text(const cllm_model *m, cllm_sampler *smp, const char *text) {
    int32_t ids[64];
    size_t n = 0;
    if (cllm_tokenize(m, text, strlen(text), false, false, ids, 64, &n) != CLLM_OK) return false;
    for (size_t i = 0; i < n; i++) {
        if (cllm_sampler_accept(smp, ids[i]) != CLLM_OK) return false;
    }
    return true;
}

/* The distribution of a sampled token under a grammar with top-k is the
 * masked one: the tokens the grammar refuses removed, then top-k. Here
 * "z" (refused) has the largest logit and top-k 2 leaves "a" and "b": a
 * draw that truncated before the mask would keep "a" far more often. Also
 * the same probabilities from the best candidates (the others finite)
 * and from the whole mask (the others -inf). */
static void test_masked_top_k(const cllm_model *m) {
    const char *w;
    const char *za[] = {"z"}, *aa[] = {"a"}, *ba[] = {"b"}, *ca[] = {"c"};
    const int32_t z = one_token(m, za, 1, &w), a = one_token(m, aa, 1, &w);
    const int32_t b = one_token(m, ba, 1, &w), c = one_token(m, ca, 1, &w);
    CHECK(z >= 0 && a >= 0 && b >= 0 && c >= 0);
    if (z < 0 || a < 0 || b < 0 || c < 0) return;
    const int64_t nv = cllm_model_n_vocab(m);
    float *logits = malloc((size_t)nv * sizeof(float));
    double pa[2] = {0, 0};
    for (int masked = 0; masked < 2 && logits; masked++) {
        for (int64_t i = 0; i < nv; i++) logits[i] = masked ? -INFINITY : -20.0f;
        logits[z] = 2.0f, logits[a] = 1.5f, logits[b] = 1.0f, logits[c] = 0.5f;
        cllm_sampler_params sp = cllm_sampler_default_params();
        sp.grammar = "root ::= \"a\" | \"b\" | \"c\"";
        sp.temperature = 1.0f, sp.top_k = 2, sp.top_p = 1.0f, sp.min_p = 0.0f;
        sp.seed = 7;
        cllm_sampler *smp = NULL;
        CHECK(cllm_sampler_new_model(&sp, m, &smp) == CLLM_OK);
        if (!smp) break;
        const cllm_sampler_cand *cand = NULL;
        int32_t n = 0;
        CHECK(cllm_sampler_probs(smp, logits, &cand, &n) == CLLM_OK && n == 2);
        const double want = exp(0.5) / (exp(0.5) + 1.0); /* "a" among "a" and "b" */
        CHECKF(n == 2 && cand[0].id == a && cand[1].id == b && fabs(cand[0].p - want) < 1e-5,
               "masked %d: probs %d: %d %g", masked, n, n > 0 ? cand[0].id : -1,
               n > 0 ? (double)cand[0].p : 0.0);
        pa[masked] = n > 0 ? cand[0].p : 0.0;
        const int draws = 4000;
        int n_a = 0, other = 0;
        for (int k = 0; k < draws; k++) {
            int32_t id = -1;
            if (cllm_sampler_sample(smp, logits, &id) != CLLM_OK) other++;
            n_a += id == a;
            other += id != a && id != b;
        }
        /* sd of the frequency: sqrt(0.62 * 0.38 / 4000) = 0.008 */
        const double f = (double)n_a / draws;
        CHECKF(other == 0 && fabs(f - want) < 0.04, "masked %d: \"a\" drawn %.3f, want %.3f",
               masked, f, want);
        cllm_sampler_free(smp);
    }
    CHECK(pa[0] == pa[1]);
    free(logits);
}

/* A lazy grammar: free text until a trigger word (across tokens) or token,
 * constrained from the word's first byte on; a token that brings the word
 * with bytes the grammar refuses after it is never drawn. */
static void test_lazy(const cllm_model *m) {
    const int32_t nv = (int32_t)cllm_model_n_vocab(m);
    cllm_sampler_params sp = cllm_sampler_default_params();
    sp.temperature = 0;
    const char *words[] = {"<call>"};
    sp.grammar_triggers = words;
    sp.n_grammar_triggers = 1;
    cllm_sampler *smp = NULL;
    /* refused: triggers without a grammar, an empty or too long word, a
     * token out of range */
    CHECK(cllm_sampler_new_model(&sp, m, &smp) == CLLM_ERR_INVALID_ARG && !smp);
    sp.grammar = "root ::= \"<call>\" [0-9]+ \"</call>\"";
    const char *empty[] = {""};
    sp.grammar_triggers = empty;
    CHECK(cllm_sampler_params_check(&sp, nv) == CLLM_ERR_INVALID_ARG);
    char long_word[CLLM_SAMPLER_MAX_TRIGGER + 2];
    memset(long_word, 'a', sizeof(long_word) - 1);
    long_word[sizeof(long_word) - 1] = '\0';
    const char *longs[] = {long_word};
    sp.grammar_triggers = longs;
    CHECK(cllm_sampler_params_check(&sp, nv) == CLLM_ERR_INVALID_ARG);
    sp.grammar_triggers = words;
    const int32_t bad_tok = nv;
    sp.grammar_trigger_tokens = &bad_tok;
    sp.n_grammar_trigger_tokens = 1;
    CHECK(cllm_sampler_params_check(&sp, nv) == CLLM_ERR_INVALID_ARG);
    sp.grammar_trigger_tokens = NULL;
    CHECK(cllm_sampler_params_check(&sp, nv) == CLLM_ERR_INVALID_ARG);
    sp.n_grammar_trigger_tokens = 0;
    CHECK(cllm_sampler_params_check(&sp, nv) == CLLM_OK);

    float *logits = calloc((size_t)nv, sizeof(float));
    const char *letters[] = {"x", "y", "z"};
    const char *letter = NULL;
    const int32_t x = one_token(m, letters, 3, &letter);
    CHECK(x >= 0 && logits);
    if (!logits || x < 0 || cllm_sampler_new_model(&sp, m, &smp) != CLLM_OK) {
        CHECKF(false, "lazy sampler: %s", cllm_last_error());
        free(logits);
        return;
    }
    logits[x] = 50.0f;
    int32_t id = -1;
    /* off: the text is free, a letter wins */
    CHECK(!cllm_sampler_grammar_on(smp));
    CHECK(accept_text(m, smp, "Here is a call: "));
    CHECK(!cllm_sampler_grammar_on(smp));
    CHECK(cllm_sampler_sample(smp, logits, &id) == CLLM_OK && id == x);
    /* the word across its tokens turns it on: digits only, then no end
     * token before the closing tag */
    CHECK(accept_text(m, smp, "<call>"));
    CHECK(cllm_sampler_grammar_on(smp));
    CHECK(cllm_sampler_sample(smp, logits, &id) == CLLM_OK && id != x);
    char piece[64];
    size_t len = 0;
    CHECK(cllm_detokenize(m, &id, 1, 0, piece, sizeof(piece) - 1, &len) == CLLM_OK);
    piece[len] = '\0';
    CHECKF(len > 0 && piece[0] >= '0' && piece[0] <= '9', "after the trigger: \"%s\"", piece);
    CHECK(cllm_sampler_accept(smp, x) == CLLM_ERR_INVALID_ARG);
    CHECK(accept_text(m, smp, "42"));
    CHECK(cllm_sampler_accept(smp, cllm_token_eos(m)) == CLLM_ERR_INVALID_ARG);
    CHECK(accept_text(m, smp, "</call>"));
    CHECK(cllm_sampler_accept(smp, cllm_token_eos(m)) == CLLM_OK);
    /* reset: off again */
    cllm_sampler_reset(smp);
    CHECK(!cllm_sampler_grammar_on(smp));
    CHECK(cllm_sampler_sample(smp, logits, &id) == CLLM_OK && id == x);
    cllm_sampler_free(smp);
    smp = NULL;

    /* a token that brings the word "he" with bytes "hello" cannot follow
     * is never drawn, one with bytes it can is */
    const char *refused[] = {"help", "head", "her", "here", "heat"};
    const char *taken[] = {"hel", "hell", "hello"};
    const char *wr = NULL, *wt = NULL;
    const int32_t r = one_token(m, refused, 5, &wr), t = one_token(m, taken, 3, &wt);
    CHECKF(r >= 0 && t >= 0, "no one-token word: %d %d", r, t);
    const char *he[] = {"he"};
    sp.grammar = "root ::= \"hello world\"";
    sp.grammar_triggers = he;
    if (r >= 0 && t >= 0 && cllm_sampler_new_model(&sp, m, &smp) == CLLM_OK) {
        logits[x] = 0.0f;
        logits[r] = 50.0f;
        logits[t] = 40.0f;
        CHECKF(cllm_sampler_sample(smp, logits, &id) == CLLM_OK && id == t,
               "\"%s\" drawn, not \"%s\"", id == r ? wr : "another", wt);
        CHECK(cllm_sampler_accept(smp, r) == CLLM_ERR_INVALID_ARG);
        CHECK(!cllm_sampler_grammar_on(smp));
        CHECK(cllm_sampler_accept(smp, t) == CLLM_OK && cllm_sampler_grammar_on(smp));
        logits[r] = logits[t] = 0.0f;
    }
    cllm_sampler_free(smp);
    smp = NULL;

    /* a trigger token: the grammar on after it, its text not read */
    sp.grammar = "root ::= \"yes\" | \"no\"";
    sp.grammar_triggers = NULL;
    sp.n_grammar_triggers = 0;
    sp.grammar_trigger_tokens = &x;
    sp.n_grammar_trigger_tokens = 1;
    if (cllm_sampler_new_model(&sp, m, &smp) == CLLM_OK) {
        logits[x] = 50.0f;
        CHECK(accept_text(m, smp, "maybe "));
        CHECK(!cllm_sampler_grammar_on(smp));
        CHECK(cllm_sampler_accept(smp, x) == CLLM_OK && cllm_sampler_grammar_on(smp));
        CHECK(cllm_sampler_sample(smp, logits, &id) == CLLM_OK && id != x);
        CHECK(accept_text(m, smp, "yes"));
        CHECK(cllm_sampler_sample(smp, logits, &id) == CLLM_OK && cllm_token_is_eog(m, id));
    } else {
        CHECKF(false, "trigger token: %s", cllm_last_error());
    }
    cllm_sampler_free(smp);
    free(logits);
}

int main(void) {
    cllm_log_set(quiet_log, NULL);
    test_good();
    test_bad();
    test_limits();
    test_json_grammar();
    char path[4096];
    if (refs_fetch_model("smollm2", path, sizeof(path))) {
        cllm_model *m = NULL;
        if (cllm_model_load(path, NULL, &m) != CLLM_OK) {
            CHECKF(false, "load %s: %s", path, cllm_last_error());
        } else {
            test_masks(m);
            test_generation(m);
            test_masked_top_k(m);
            test_lazy(m);
        }
        cllm_model_free(m);
    }
    return check_summary("test_grammar");
}
