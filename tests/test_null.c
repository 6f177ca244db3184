/*
 * Every public function of cllm.h and cllm-pipeline.h called with NULL for
 * each handle and each pointer it needs (the rule of cllm.h's Conventions):
 * a function that returns a cllm_status returns CLLM_ERR_INVALID_ARG with a
 * message, one that returns a value returns its "none" (NULL, 0, false, -1
 * where the header says so), one that returns nothing does nothing.
 *
 * Each case runs in a child process of its own, so that one that crashes
 * is reported by name and the others still run. tests/null-coverage.sh
 * checks that every function the headers declare has a CASE here.
 */
#include "cllm-pipeline.h"
#include "cllm.h"
#include "common/check.h"
#include "common/refs.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static cllm_model *g_model;     /* stories260K, or NULL without test data */
static cllm_session *g_session; /* on g_model */
static cllm_sampler *g_sampler; /* for g_model's vocabulary */

/* A status call that must refuse a NULL with CLLM_ERR_INVALID_ARG and say so. */
#define REFUSED(call)                                                                              \
    do {                                                                                           \
        const cllm_status st_ = (call);                                                            \
        CHECKF(st_ == CLLM_ERR_INVALID_ARG && cllm_last_error()[0] != '\0',                        \
               "%s: status %d (%s), message '%s'", #call, (int)st_, cllm_status_str(st_),          \
               cllm_last_error());                                                                 \
    } while (0)

typedef struct null_case {
    const char *name;
    void (*run)(void);
} null_case;

#define CASE(name) static void case_##name(void)

/* ---- no handle: called for coverage, with out-of-range values ---------- */

CASE(cllm_status_str) { CHECK(cllm_status_str((cllm_status)-1) != NULL); }
CASE(cllm_mem_kind_str) { CHECK(cllm_mem_kind_str(CLLM_MEM_COUNT) != NULL); }
CASE(cllm_log_set) {
    cllm_log_set(NULL, NULL); /* the default logger */
    cllm_log_set(NULL, &g_model);
}
CASE(cllm_log_set_level) {
    cllm_log_set_level((cllm_log_level)99);
    CHECK(cllm_log_get_level() < CLLM_LOG_COUNT);
}
CASE(cllm_log_get_level) { CHECK(cllm_log_get_level() < CLLM_LOG_COUNT); }
CASE(cllm_last_error) { CHECK(cllm_last_error() != NULL); }
CASE(cllm_escape) {
    CHECK(cllm_escape(NULL, 0, "ab", 2, CLLM_ESCAPE_TEXT) == 2);
    CHECK(cllm_escape(NULL, 0, NULL, 0, CLLM_ESCAPE_TEXT) == 0);
    char buf[4] = "x";
    CHECK(cllm_escape(buf, sizeof(buf), NULL, 5, CLLM_ESCAPE_JSON) == 0 && buf[0] == '\0');
}
CASE(cllm_escape_fputs) {
    cllm_escape_fputs(NULL, "ab", 2, CLLM_ESCAPE_TEXT);
    cllm_escape_fputs(stdout, NULL, 3, CLLM_ESCAPE_TEXT);
}
CASE(cllm_version) { CHECK(cllm_version() != NULL); }
CASE(cllm_time_ms) { CHECK(cllm_time_ms() > 0); }
CASE(cllm_type_name) { CHECK(cllm_type_name((cllm_type)1000) != NULL); }
CASE(cllm_device_kind_str) { CHECK(cllm_device_kind_str((cllm_device_kind)99) != NULL); }
CASE(cllm_device_count) { CHECK(cllm_device_count() >= 1); }
CASE(cllm_device_get) { CHECK(cllm_device_get(-1) == NULL && cllm_device_get(1 << 20) == NULL); }
CASE(cllm_device_name) { CHECK(cllm_device_name(NULL) == NULL); }
CASE(cllm_device_description) { CHECK(cllm_device_description(NULL) == NULL); }
CASE(cllm_device_kind_of) { CHECK((int)cllm_device_kind_of(NULL) == 0); }
CASE(cllm_device_memory) {
    size_t f = 1, t = 1;
    cllm_device_memory(NULL, &f, &t);
    CHECK(f == 0 && t == 0);
    cllm_device_memory(cllm_device_get(0), NULL, NULL);
}
CASE(cllm_device_enable_test) { REFUSED(cllm_device_enable_test(NULL)); }
CASE(cllm_cpu_physical_cores) { CHECK(cllm_cpu_physical_cores() >= 1); }
CASE(cllm_cpu_features) { CHECK(cllm_cpu_features() != NULL); }
CASE(cllm_format_size) {
    CHECK(cllm_format_size(1024, NULL, 0) == NULL);
    char b[16];
    CHECK(cllm_format_size(1024, b, 0) == NULL);
}

/* ---- GGUF --------------------------------------------------------------- */

CASE(cllm_gguf_open) {
    cllm_gguf *g = NULL;
    REFUSED(cllm_gguf_open(NULL, &g));
    REFUSED(cllm_gguf_open("x.gguf", NULL));
    CHECK(g == NULL);
}
CASE(cllm_gguf_free) { cllm_gguf_free(NULL); }
CASE(cllm_gguf_version) { CHECK(cllm_gguf_version(NULL) == 0); }
CASE(cllm_gguf_alignment) { CHECK(cllm_gguf_alignment(NULL) == 0); }
CASE(cllm_gguf_data_offset) { CHECK(cllm_gguf_data_offset(NULL) == 0); }
CASE(cllm_gguf_n_kv) { CHECK(cllm_gguf_n_kv(NULL) == 0); }
CASE(cllm_gguf_key) { CHECK(cllm_gguf_key(NULL, 0) == NULL); }
CASE(cllm_gguf_find_key) {
    CHECK(cllm_gguf_find_key(NULL, "general.architecture") == -1);
    if (g_model) CHECK(cllm_gguf_find_key(cllm_model_gguf(g_model), NULL) == -1);
}
CASE(cllm_gguf_kv_type_str) { CHECK(cllm_gguf_kv_type_str(NULL, 0) == NULL); }
CASE(cllm_gguf_val_to_str) {
    char b[8] = "x";
    CHECK(cllm_gguf_val_to_str(NULL, 0, b, sizeof(b)) == 0);
    if (g_model) CHECK(cllm_gguf_val_to_str(cllm_model_gguf(g_model), 0, NULL, 0) > 0);
}
CASE(cllm_gguf_n_tensors) { CHECK(cllm_gguf_n_tensors(NULL) == 0); }
CASE(cllm_gguf_tensor_desc) {
    const cllm_tensor_desc d = cllm_gguf_tensor_desc(NULL, 0);
    CHECK(d.name == NULL && d.n_dims == 0);
}
CASE(cllm_gguf_split_name) {
    int no = 0, count = 0;
    CHECK(!cllm_gguf_split_name(NULL, &no, &count));
    CHECK(!cllm_gguf_split_name("m-00001-of-00002.gguf", NULL, &count));
    CHECK(!cllm_gguf_split_name("m-00001-of-00002.gguf", &no, NULL));
    CHECK(cllm_gguf_split_name("m-00001-of-00002.gguf", &no, &count) && no == 1 && count == 2);
}
CASE(cllm_gguf_split_part) {
    char b[64];
    REFUSED(cllm_gguf_split_part(NULL, 1, b, sizeof(b)));
    REFUSED(cllm_gguf_split_part("m-00001-of-00002.gguf", 1, NULL, 0));
    CHECK(cllm_gguf_split_part("m-00001-of-00002.gguf", 2, b, sizeof(b)) == CLLM_OK &&
          !strcmp(b, "m-00002-of-00002.gguf"));
}
CASE(cllm_gguf_join) {
    REFUSED(cllm_gguf_join(NULL, "out.gguf", NULL, NULL));
    REFUSED(cllm_gguf_join("m-00001-of-00002.gguf", NULL, NULL, NULL));
}

/* ---- plans -------------------------------------------------------------- */

CASE(cllm_plan_default_params) { (void)cllm_plan_default_params(); }
CASE(cllm_plan_add_budget) {
    cllm_plan_params p = cllm_plan_default_params();
    REFUSED(cllm_plan_add_budget(NULL, "cpu", 1));
    REFUSED(cllm_plan_add_budget(&p, NULL, 1));
}
CASE(cllm_plan_parse_mem) {
    cllm_plan_params p = cllm_plan_default_params();
    REFUSED(cllm_plan_parse_mem(NULL, "cpu=1G"));
    REFUSED(cllm_plan_parse_mem(&p, NULL));
}
CASE(cllm_plan_new) {
    cllm_plan *plan = NULL;
    REFUSED(cllm_plan_new(NULL, NULL, &plan));
    if (g_model) REFUSED(cllm_plan_new(cllm_model_gguf(g_model), NULL, NULL));
    CHECK(plan == NULL);
}
CASE(cllm_plan_file) {
    cllm_plan *plan = NULL;
    REFUSED(cllm_plan_file(NULL, NULL, &plan));
    REFUSED(cllm_plan_file("x.gguf", NULL, NULL));
    CHECK(plan == NULL);
}
CASE(cllm_plan_free) { cllm_plan_free(NULL); }
CASE(cllm_plan_print) { cllm_plan_print(NULL, stdout, true); }
CASE(cllm_plan_print_json) { cllm_plan_print_json(NULL, stdout, true); }

/* ---- models ------------------------------------------------------------- */

CASE(cllm_model_default_params) { (void)cllm_model_default_params(); }
CASE(cllm_model_load) {
    cllm_model *m = NULL;
    REFUSED(cllm_model_load(NULL, NULL, &m));
    REFUSED(cllm_model_load("x.gguf", NULL, NULL));
    CHECK(m == NULL);
}
CASE(cllm_model_free) { cllm_model_free(NULL); }
CASE(cllm_model_check) { REFUSED(cllm_model_check(NULL)); }
CASE(cllm_model_stream_usage) {
    cllm_stream_usage u;
    REFUSED(cllm_model_stream_usage(NULL, &u));
    if (g_model) {
        REFUSED(cllm_model_stream_usage(g_model, NULL));
        CHECK(cllm_model_stream_usage(g_model, &u) == CLLM_OK && u.n_layers == 0 &&
              u.bytes_read == 0 && u.passes == 0); /* resident: nothing streamed */
    }
}
CASE(cllm_file_write) {
    REFUSED(cllm_file_write(NULL, "x", 1));
    REFUSED(cllm_file_write("x.bin", NULL, 1));
}
CASE(cllm_model_n_vocab) { CHECK(cllm_model_n_vocab(NULL) == 0); }
CASE(cllm_model_n_ctx_train) { CHECK(cllm_model_n_ctx_train(NULL) == 0); }
CASE(cllm_model_n_layer) { CHECK(cllm_model_n_layer(NULL) == 0); }
CASE(cllm_model_n_embd) { CHECK(cllm_model_n_embd(NULL) == 0); }
CASE(cllm_model_arch) { CHECK(cllm_model_arch(NULL) == NULL); }
CASE(cllm_model_gguf) { CHECK(cllm_model_gguf(NULL) == NULL); }
CASE(cllm_model_meta_str) {
    char b[8];
    CHECK(cllm_model_meta_str(NULL, "general.architecture", b, sizeof(b)) == -1);
    if (g_model) CHECK(cllm_model_meta_str(g_model, NULL, b, sizeof(b)) == -1);
}

/* ---- tokens ------------------------------------------------------------- */

CASE(cllm_tokenize) {
    int32_t ids[8];
    size_t n = 99;
    REFUSED(cllm_tokenize(NULL, "a", 1, true, false, ids, 8, &n));
    if (g_model) {
        REFUSED(cllm_tokenize(g_model, NULL, 1, true, false, ids, 8, &n));
        REFUSED(cllm_tokenize(g_model, "a", 1, true, false, NULL, 8, &n)); /* 0: measures */
        REFUSED(cllm_tokenize(g_model, "a", 1, true, false, ids, 8, NULL));
    }
    CHECK(n == 99);
}
CASE(cllm_token_to_piece) {
    size_t len = 7;
    CHECK(cllm_token_to_piece(NULL, 0, false, &len) == NULL);
    if (g_model) CHECK(cllm_token_to_piece(g_model, 1, false, NULL) == NULL);
}
CASE(cllm_detokenize) {
    const int32_t ids[1] = {1};
    char b[8];
    size_t len = 7;
    REFUSED(cllm_detokenize(NULL, ids, 1, 0, b, sizeof(b), &len));
    if (g_model) {
        REFUSED(cllm_detokenize(g_model, NULL, 1, 0, b, sizeof(b), &len));
        REFUSED(cllm_detokenize(g_model, ids, 1, 0, b, sizeof(b), NULL));
    }
    CHECK(len == 7);
}
CASE(cllm_detokenizer_new) {
    cllm_detokenizer *d = NULL;
    REFUSED(cllm_detokenizer_new(NULL, 0, &d));
    if (g_model) REFUSED(cllm_detokenizer_new(g_model, 0, NULL));
    CHECK(d == NULL);
}
CASE(cllm_detokenizer_free) { cllm_detokenizer_free(NULL); }
CASE(cllm_detokenizer_put) {
    const char *t = NULL;
    size_t len = 0;
    REFUSED(cllm_detokenizer_put(NULL, 1, &t, &len));
    if (g_model) {
        cllm_detokenizer *d = NULL;
        CHECK(cllm_detokenizer_new(g_model, 0, &d) == CLLM_OK);
        REFUSED(cllm_detokenizer_put(d, 1, NULL, &len));
        REFUSED(cllm_detokenizer_put(d, 1, &t, NULL));
        cllm_detokenizer_free(d);
    }
}
CASE(cllm_detokenizer_flush) {
    const char *t = "x";
    size_t len = 7;
    cllm_detokenizer_flush(NULL, &t, &len);
    CHECK(len == 0);
    cllm_detokenizer_flush(NULL, NULL, NULL);
}
CASE(cllm_detokenizer_reset) { cllm_detokenizer_reset(NULL); }
CASE(cllm_token_bos) { CHECK(cllm_token_bos(NULL) == -1); }
CASE(cllm_token_eos) { CHECK(cllm_token_eos(NULL) == -1); }
CASE(cllm_token_eot) { CHECK(cllm_token_eot(NULL) == -1); }
CASE(cllm_token_is_eog) { CHECK(!cllm_token_is_eog(NULL, 0)); }
CASE(cllm_token_add_bos) { CHECK(!cllm_token_add_bos(NULL)); }

/* ---- chat --------------------------------------------------------------- */

CASE(cllm_chat_apply) {
    const cllm_chat_msg msg = {"user", "hi"};
    char *out = NULL;
    size_t len = 0;
    REFUSED(cllm_chat_apply(NULL, NULL, &msg, 1, true, &out, &len, NULL));
    if (g_model) {
        REFUSED(cllm_chat_apply(g_model, "chatml", NULL, 1, true, &out, &len, NULL));
        REFUSED(cllm_chat_apply(g_model, "chatml", &msg, 1, true, NULL, &len, NULL));
    }
    CHECK(out == NULL);
}
CASE(cllm_chat_template_render) {
    char *out = NULL;
    REFUSED(cllm_chat_template_render(NULL, "{}", &out, NULL));
    REFUSED(cllm_chat_template_render("x", NULL, &out, NULL));
    REFUSED(cllm_chat_template_render("x", "{}", NULL, NULL));
    CHECK(out == NULL);
}
CASE(cllm_model_chat_template) { CHECK(cllm_model_chat_template(NULL) == NULL); }
CASE(cllm_chat_style_detect) {
    cllm_chat_style st;
    REFUSED(cllm_chat_style_detect(NULL, &st));
    REFUSED(cllm_chat_style_detect("x", NULL));
}
CASE(cllm_chat_style_name) { CHECK(cllm_chat_style_name((cllm_chat_style)999) != NULL); }
CASE(cllm_chat_style_from_name) {
    cllm_chat_style st;
    CHECK(cllm_chat_style_from_name(NULL, &st) == CLLM_ERR_UNSUPPORTED); /* no such style */
    REFUSED(cllm_chat_style_from_name("chatml", NULL));
}
CASE(cllm_chat_style_has_bos_text) { (void)cllm_chat_style_has_bos_text((cllm_chat_style)999); }
CASE(cllm_chat_style_eot) { (void)cllm_chat_style_eot((cllm_chat_style)999); }
CASE(cllm_chat_default_system) {
    char *out = NULL;
    CHECK(cllm_chat_default_system(NULL, &out) == CLLM_OK && out == NULL); /* no template */
    REFUSED(cllm_chat_default_system("x", NULL));
}
CASE(cllm_chat_render) {
    const cllm_chat_msg msg = {"user", "hi"};
    char b[64];
    size_t needed = 0;
    cllm_chat_style style;
    CHECK(cllm_chat_style_from_name("chatml", &style) == CLLM_OK);
    REFUSED(cllm_chat_render(style, NULL, 1, true, b, sizeof(b), &needed));
    REFUSED(cllm_chat_render(style, &msg, 1, true, b, sizeof(b), NULL));
    REFUSED(cllm_chat_render(style, &msg, 1, true, NULL, sizeof(b), &needed));
}
CASE(cllm_chat_render_alloc) {
    const cllm_chat_msg msg = {"user", "hi"};
    char *out = NULL;
    cllm_chat_style style;
    CHECK(cllm_chat_style_from_name("chatml", &style) == CLLM_OK);
    REFUSED(cllm_chat_render_alloc(style, NULL, 1, true, &out, NULL));
    REFUSED(cllm_chat_render_alloc(style, &msg, 1, true, NULL, NULL));
    CHECK(out == NULL);
}

/* ---- sessions ----------------------------------------------------------- */

CASE(cllm_session_default_params) { (void)cllm_session_default_params(); }
CASE(cllm_session_new) {
    cllm_session *s = NULL;
    REFUSED(cllm_session_new(NULL, NULL, &s));
    if (g_model) REFUSED(cllm_session_new(g_model, NULL, NULL));
    CHECK(s == NULL);
}
CASE(cllm_session_free) { cllm_session_free(NULL); }
CASE(cllm_pooling_str) { CHECK(cllm_pooling_str((cllm_pooling)99) != NULL); }
CASE(cllm_pooling_parse) {
    cllm_pooling p = CLLM_POOLING_MEAN;
    REFUSED(cllm_pooling_parse(NULL, &p));
    REFUSED(cllm_pooling_parse("mean", NULL));
}
CASE(cllm_model_pooling) { CHECK(cllm_model_pooling(NULL) == CLLM_POOLING_MEAN); }
CASE(cllm_embd_normalize) { cllm_embd_normalize(NULL, 4, 2); }
CASE(cllm_session_seq_embed) {
    const int32_t ids[1] = {1};
    float out[1];
    REFUSED(cllm_session_seq_embed(NULL, 0, ids, 1, CLLM_POOLING_MEAN, out));
    if (g_session) {
        REFUSED(cllm_session_seq_embed(g_session, 0, NULL, 1, CLLM_POOLING_MEAN, out));
        REFUSED(cllm_session_seq_embed(g_session, 0, ids, 1, CLLM_POOLING_MEAN, NULL));
    }
}
CASE(cllm_session_embed) {
    const int32_t ids[1] = {1};
    float out[1];
    REFUSED(cllm_session_embed(NULL, ids, 1, CLLM_POOLING_MEAN, out));
    if (g_session) REFUSED(cllm_session_embed(g_session, NULL, 1, CLLM_POOLING_MEAN, out));
}
CASE(cllm_session_decode) {
    const int32_t ids[1] = {1};
    REFUSED(cllm_session_decode(NULL, ids, 1));
    if (g_session) REFUSED(cllm_session_decode(g_session, NULL, 1));
}
CASE(cllm_session_logits) { CHECK(cllm_session_logits(NULL) == NULL); }
CASE(cllm_session_logits_ith) { CHECK(cllm_session_logits_ith(NULL, 0) == NULL); }
CASE(cllm_session_truncate) { REFUSED(cllm_session_truncate(NULL, 0)); }
CASE(cllm_session_reset) { cllm_session_reset(NULL); }
CASE(cllm_session_decode_seqs) {
    const int32_t ids[1] = {1};
    const cllm_seq_tokens items[1] = {{0, ids, 1}};
    const cllm_seq_tokens bad[1] = {{0, NULL, 1}};
    REFUSED(cllm_session_decode_seqs(NULL, items, 1));
    if (g_session) {
        REFUSED(cllm_session_decode_seqs(g_session, NULL, 1));
        REFUSED(cllm_session_decode_seqs(g_session, bad, 1));
    }
}
CASE(cllm_session_seq_logits) { CHECK(cllm_session_seq_logits(NULL, 0) == NULL); }
CASE(cllm_session_seq_n_past) { CHECK(cllm_session_seq_n_past(NULL, 0) == -1); }
CASE(cllm_session_seq_truncate) { REFUSED(cllm_session_seq_truncate(NULL, 0, 0)); }
CASE(cllm_session_n_seq) { CHECK(cllm_session_n_seq(NULL) == 0); }
CASE(cllm_session_n_past) { CHECK(cllm_session_n_past(NULL) == 0); }
CASE(cllm_session_n_ctx) { CHECK(cllm_session_n_ctx(NULL) == 0); }
CASE(cllm_session_n_batch) { CHECK(cllm_session_n_batch(NULL) == 0); }
CASE(cllm_session_n_vocab) { CHECK(cllm_session_n_vocab(NULL) == 0); }
CASE(cllm_session_model) { CHECK(cllm_session_model(NULL) == NULL); }
CASE(cllm_session_memory) {
    const cllm_memory_report r = cllm_session_memory(NULL);
    CHECK(r.allocated[CLLM_MEM_STATE] == 0 && r.planned[CLLM_MEM_STATE] == 0);
}
CASE(cllm_session_memory_on) {
    const cllm_memory_report r = cllm_session_memory_on(NULL, cllm_device_get(0));
    CHECK(r.allocated[CLLM_MEM_STATE] == 0 && r.planned[CLLM_MEM_STATE] == 0);
    if (g_session) (void)cllm_session_memory_on(g_session, NULL);
}

/* ---- sampling and generation -------------------------------------------- */

CASE(cllm_sampler_default_params) { (void)cllm_sampler_default_params(); }
CASE(cllm_sampler_new) {
    cllm_sampler *s = NULL;
    const cllm_sampler_params p = cllm_sampler_default_params();
    REFUSED(cllm_sampler_new(NULL, 32, &s));
    REFUSED(cllm_sampler_new(&p, 32, NULL));
    CHECK(s == NULL);
}
CASE(cllm_sampler_new_model) {
    cllm_sampler *s = NULL;
    const cllm_sampler_params p = cllm_sampler_default_params();
    REFUSED(cllm_sampler_new_model(&p, NULL, &s));
    if (g_model) {
        REFUSED(cllm_sampler_new_model(NULL, g_model, &s));
        REFUSED(cllm_sampler_new_model(&p, g_model, NULL));
    }
    CHECK(s == NULL);
}
CASE(cllm_sampler_params_check) { REFUSED(cllm_sampler_params_check(NULL, 32)); }
CASE(cllm_sampler_free) { cllm_sampler_free(NULL); }
CASE(cllm_sampler_sample) {
    float logits[32] = {0};
    int32_t tok = 7;
    REFUSED(cllm_sampler_sample(NULL, logits, &tok));
    if (g_sampler) {
        REFUSED(cllm_sampler_sample(g_sampler, NULL, &tok));
        REFUSED(cllm_sampler_sample(g_sampler, logits, NULL));
    }
    CHECK(tok == 7);
}
CASE(cllm_sampler_probs) {
    float logits[32] = {0};
    const cllm_sampler_cand *c = NULL;
    int32_t n = 7;
    REFUSED(cllm_sampler_probs(NULL, logits, &c, &n));
    if (g_sampler) {
        REFUSED(cllm_sampler_probs(g_sampler, NULL, &c, &n));
        REFUSED(cllm_sampler_probs(g_sampler, logits, NULL, &n));
        REFUSED(cllm_sampler_probs(g_sampler, logits, &c, NULL));
    }
    CHECK(n == 7);
}
CASE(cllm_sampler_accept) { REFUSED(cllm_sampler_accept(NULL, 1)); }
CASE(cllm_sampler_accept_prompt) {
    const int32_t ids[1] = {1};
    REFUSED(cllm_sampler_accept_prompt(NULL, ids, 1));
    if (g_sampler) REFUSED(cllm_sampler_accept_prompt(g_sampler, NULL, 1));
}
CASE(cllm_sampler_reset) { cllm_sampler_reset(NULL); }
CASE(cllm_sampler_grammar_on) { CHECK(!cllm_sampler_grammar_on(NULL)); }
CASE(cllm_json_schema_to_grammar) {
    char *out = NULL;
    REFUSED(cllm_json_schema_to_grammar(NULL, &out));
    REFUSED(cllm_json_schema_to_grammar("{}", NULL));
    CHECK(out == NULL);
}
CASE(cllm_json_grammar) { CHECK(cllm_json_grammar() != NULL); }
CASE(cllm_stop_reason_str) { CHECK(cllm_stop_reason_str((cllm_stop_reason)99) != NULL); }
CASE(cllm_generate) {
    const int32_t ids[1] = {1};
    cllm_generate_result res;
    REFUSED(cllm_generate(NULL, g_sampler, ids, 1, 1, NULL, NULL, &res));
    if (g_session) {
        REFUSED(cllm_generate(g_session, NULL, ids, 1, 1, NULL, NULL, &res));
        REFUSED(cllm_generate(g_session, g_sampler, NULL, 1, 1, NULL, NULL, &res));
        REFUSED(cllm_generate(g_session, g_sampler, ids, 1, 1, NULL, NULL, NULL));
    }
}
CASE(cllm_generate_result_free) { cllm_generate_result_free(NULL); }
CASE(cllm_generate_spec) {
    const int32_t ids[1] = {1};
    cllm_generate_result res;
    REFUSED(cllm_generate_spec(NULL, g_sampler, ids, 1, 1, NULL, NULL, NULL, &res));
    if (g_session) {
        REFUSED(cllm_generate_spec(g_session, NULL, ids, 1, 1, NULL, NULL, NULL, &res));
        REFUSED(cllm_generate_spec(g_session, g_sampler, NULL, 1, 1, NULL, NULL, NULL, &res));
        REFUSED(cllm_generate_spec(g_session, g_sampler, ids, 1, 1, NULL, NULL, NULL, NULL));
    }
}
CASE(cllm_spec_default_params) { CHECK(cllm_spec_default_params().draft_max > 0); }
CASE(cllm_spec_params_check) { REFUSED(cllm_spec_params_check(NULL)); }
CASE(cllm_spec_type_str) { CHECK(cllm_spec_type_str((cllm_spec_type)99) != NULL); }
CASE(cllm_spec_type_parse) {
    cllm_spec_type t;
    REFUSED(cllm_spec_type_parse(NULL, &t));
    REFUSED(cllm_spec_type_parse("none", NULL));
}
CASE(cllm_spec_ngram_draft) {
    const cllm_spec_params p = cllm_spec_default_params();
    const int32_t h[3] = {1, 1, 1};
    int32_t d[4];
    CHECK(cllm_spec_ngram_draft(NULL, h, 3, 4, d) == 0);
    CHECK(cllm_spec_ngram_draft(&p, NULL, 3, 4, d) == 0);
    CHECK(cllm_spec_ngram_draft(&p, h, 3, 4, NULL) == 0);
}
CASE(cllm_draft_new) {
    cllm_draft *d = NULL;
    REFUSED(cllm_draft_new(NULL, g_model, NULL, &d));
    if (g_model) {
        REFUSED(cllm_draft_new(g_model, NULL, NULL, &d));
        REFUSED(cllm_draft_new(g_model, g_model, NULL, NULL));
    }
    CHECK(d == NULL);
}
CASE(cllm_draft_free) { cllm_draft_free(NULL); }
CASE(cllm_draft_session) { CHECK(cllm_draft_session(NULL) == NULL); }

/* ---- the engine --------------------------------------------------------- */

static void no_event(const cllm_event *ev, void *ud) { (void)ev, (void)ud; }

CASE(cllm_request_default_params) { (void)cllm_request_default_params(); }
CASE(cllm_engine_new) {
    cllm_engine *e = NULL;
    REFUSED(cllm_engine_new(NULL, NULL, no_event, NULL, &e));
    if (g_model) {
        REFUSED(cllm_engine_new(g_model, NULL, NULL, NULL, &e));
        REFUSED(cllm_engine_new(g_model, NULL, no_event, NULL, NULL));
    }
    CHECK(e == NULL);
}
CASE(cllm_engine_new_session) {
    cllm_engine *e = NULL;
    REFUSED(cllm_engine_new_session(NULL, no_event, NULL, &e));
    if (g_session) {
        REFUSED(cllm_engine_new_session(g_session, NULL, NULL, &e));
        REFUSED(cllm_engine_new_session(g_session, no_event, NULL, NULL));
    }
    CHECK(e == NULL);
}
CASE(cllm_engine_free) { cllm_engine_free(NULL); }
CASE(cllm_engine_submit_embed) {
    const int32_t ids[1] = {1};
    uint64_t id = 0;
    REFUSED(cllm_engine_submit_embed(NULL, ids, 1, CLLM_POOLING_MEAN, NULL, &id));
}
CASE(cllm_engine_submit) {
    const int32_t ids[1] = {1};
    uint64_t id = 0;
    REFUSED(cllm_engine_submit(NULL, ids, 1, NULL, NULL, &id));
    if (g_model) {
        cllm_engine *e = NULL;
        CHECK(cllm_engine_new(g_model, NULL, no_event, NULL, &e) == CLLM_OK);
        REFUSED(cllm_engine_submit(e, NULL, 1, NULL, NULL, &id));
        CHECK(cllm_engine_n_waiting(e) == 0);
        cllm_engine_free(e);
    }
}
CASE(cllm_engine_cancel) { REFUSED(cllm_engine_cancel(NULL, 1)); }
CASE(cllm_engine_step) { REFUSED(cllm_engine_step(NULL)); }
CASE(cllm_engine_n_waiting) { CHECK(cllm_engine_n_waiting(NULL) == 0); }
CASE(cllm_engine_n_running) { CHECK(cllm_engine_n_running(NULL) == 0); }
CASE(cllm_engine_session) { CHECK(cllm_engine_session(NULL) == NULL); }

/* ---- the pipeline (cllm-pipeline.h) ------------------------------------- */

CASE(cllm_pipe_plan_file) {
    cllm_pipe_plan plan;
    REFUSED(cllm_pipe_plan_file(NULL, NULL, 2, &plan));
    REFUSED(cllm_pipe_plan_file("x.gguf", NULL, 2, NULL));
}
CASE(cllm_pipe_plan_print) {
    cllm_pipe_plan_print(NULL, stdout);
    cllm_pipe_plan plan;
    memset(&plan, 0, sizeof(plan));
    cllm_pipe_plan_print(&plan, NULL);
}
CASE(cllm_pipe_have_mpi) { (void)cllm_pipe_have_mpi(); }
CASE(cllm_pipe_launched) { (void)cllm_pipe_launched(); }
CASE(cllm_pipe_init) {
    /* MPI takes NULL for both; without MPI there is nothing to start */
    if (!cllm_pipe_have_mpi()) (void)cllm_pipe_init(NULL, NULL);
}
CASE(cllm_pipe_any_thread) { (void)cllm_pipe_any_thread(); }
CASE(cllm_pipe_finalize) {
    if (!cllm_pipe_have_mpi()) cllm_pipe_finalize(false);
}
CASE(cllm_pipe_default_opts) { (void)cllm_pipe_default_opts(); }
CASE(cllm_pipe_open) {
    cllm_pipe *p = NULL;
    REFUSED(cllm_pipe_open(NULL, NULL, NULL, &p));
    REFUSED(cllm_pipe_open("x.gguf", NULL, NULL, NULL));
    CHECK(p == NULL);
}
CASE(cllm_pipe_rank) { CHECK(cllm_pipe_rank(NULL) == 0); }
CASE(cllm_pipe_size) { CHECK(cllm_pipe_size(NULL) == 0); }
CASE(cllm_pipe_get_plan) { CHECK(cllm_pipe_get_plan(NULL) == NULL); }
CASE(cllm_pipe_model) { CHECK(cllm_pipe_model(NULL) == NULL); }
CASE(cllm_pipe_session) { CHECK(cllm_pipe_session(NULL) == NULL); }
CASE(cllm_pipe_n_seq) { CHECK(cllm_pipe_n_seq(NULL) == 0); }
CASE(cllm_pipe_serve) { REFUSED(cllm_pipe_serve(NULL)); }
CASE(cllm_pipe_close) { REFUSED(cllm_pipe_close(NULL)); }
CASE(cllm_pipe_comm_seconds) { CHECK(cllm_pipe_comm_seconds(NULL) == 0); }
CASE(cllm_pipe_bytes_sent) { CHECK(cllm_pipe_bytes_sent(NULL) == 0); }
CASE(cllm_pipe_gather_stats) {
    cllm_pipe_stats st;
    REFUSED(cllm_pipe_gather_stats(NULL, &st));
}
CASE(cllm_pipe_measure_transfer) {
    double s = 0;
    REFUSED(cllm_pipe_measure_transfer(NULL, 8, 1, &s));
}
CASE(cllm_pipe_free) { cllm_pipe_free(NULL); }

/* ---- the table ---------------------------------------------------------- */

#define ENTRY(name)                                                                                \
    { #name, case_##name }
static const null_case k_cases[] = {
    ENTRY(cllm_status_str),
    ENTRY(cllm_mem_kind_str),
    ENTRY(cllm_log_set),
    ENTRY(cllm_log_set_level),
    ENTRY(cllm_log_get_level),
    ENTRY(cllm_last_error),
    ENTRY(cllm_escape),
    ENTRY(cllm_escape_fputs),
    ENTRY(cllm_version),
    ENTRY(cllm_time_ms),
    ENTRY(cllm_type_name),
    ENTRY(cllm_device_kind_str),
    ENTRY(cllm_device_count),
    ENTRY(cllm_device_get),
    ENTRY(cllm_device_name),
    ENTRY(cllm_device_description),
    ENTRY(cllm_device_kind_of),
    ENTRY(cllm_device_memory),
    ENTRY(cllm_device_enable_test),
    ENTRY(cllm_cpu_physical_cores),
    ENTRY(cllm_cpu_features),
    ENTRY(cllm_format_size),
    ENTRY(cllm_gguf_open),
    ENTRY(cllm_gguf_free),
    ENTRY(cllm_gguf_version),
    ENTRY(cllm_gguf_alignment),
    ENTRY(cllm_gguf_data_offset),
    ENTRY(cllm_gguf_n_kv),
    ENTRY(cllm_gguf_key),
    ENTRY(cllm_gguf_find_key),
    ENTRY(cllm_gguf_kv_type_str),
    ENTRY(cllm_gguf_val_to_str),
    ENTRY(cllm_gguf_n_tensors),
    ENTRY(cllm_gguf_tensor_desc),
    ENTRY(cllm_gguf_split_name),
    ENTRY(cllm_gguf_split_part),
    ENTRY(cllm_gguf_join),
    ENTRY(cllm_plan_default_params),
    ENTRY(cllm_plan_add_budget),
    ENTRY(cllm_plan_parse_mem),
    ENTRY(cllm_plan_new),
    ENTRY(cllm_plan_file),
    ENTRY(cllm_plan_free),
    ENTRY(cllm_plan_print),
    ENTRY(cllm_plan_print_json),
    ENTRY(cllm_model_default_params),
    ENTRY(cllm_model_load),
    ENTRY(cllm_model_free),
    ENTRY(cllm_model_check),
    ENTRY(cllm_model_stream_usage),
    ENTRY(cllm_file_write),
    ENTRY(cllm_model_n_vocab),
    ENTRY(cllm_model_n_ctx_train),
    ENTRY(cllm_model_n_layer),
    ENTRY(cllm_model_n_embd),
    ENTRY(cllm_model_arch),
    ENTRY(cllm_model_gguf),
    ENTRY(cllm_model_meta_str),
    ENTRY(cllm_tokenize),
    ENTRY(cllm_token_to_piece),
    ENTRY(cllm_detokenize),
    ENTRY(cllm_detokenizer_new),
    ENTRY(cllm_detokenizer_free),
    ENTRY(cllm_detokenizer_put),
    ENTRY(cllm_detokenizer_flush),
    ENTRY(cllm_detokenizer_reset),
    ENTRY(cllm_token_bos),
    ENTRY(cllm_token_eos),
    ENTRY(cllm_token_eot),
    ENTRY(cllm_token_is_eog),
    ENTRY(cllm_token_add_bos),
    ENTRY(cllm_chat_apply),
    ENTRY(cllm_chat_template_render),
    ENTRY(cllm_model_chat_template),
    ENTRY(cllm_chat_style_detect),
    ENTRY(cllm_chat_style_name),
    ENTRY(cllm_chat_style_from_name),
    ENTRY(cllm_chat_style_has_bos_text),
    ENTRY(cllm_chat_style_eot),
    ENTRY(cllm_chat_default_system),
    ENTRY(cllm_chat_render),
    ENTRY(cllm_chat_render_alloc),
    ENTRY(cllm_session_default_params),
    ENTRY(cllm_session_new),
    ENTRY(cllm_session_free),
    ENTRY(cllm_pooling_str),
    ENTRY(cllm_pooling_parse),
    ENTRY(cllm_model_pooling),
    ENTRY(cllm_embd_normalize),
    ENTRY(cllm_session_seq_embed),
    ENTRY(cllm_session_embed),
    ENTRY(cllm_session_decode),
    ENTRY(cllm_session_logits),
    ENTRY(cllm_session_logits_ith),
    ENTRY(cllm_session_truncate),
    ENTRY(cllm_session_reset),
    ENTRY(cllm_session_decode_seqs),
    ENTRY(cllm_session_seq_logits),
    ENTRY(cllm_session_seq_n_past),
    ENTRY(cllm_session_seq_truncate),
    ENTRY(cllm_session_n_seq),
    ENTRY(cllm_session_n_past),
    ENTRY(cllm_session_n_ctx),
    ENTRY(cllm_session_n_batch),
    ENTRY(cllm_session_n_vocab),
    ENTRY(cllm_session_model),
    ENTRY(cllm_session_memory),
    ENTRY(cllm_session_memory_on),
    ENTRY(cllm_sampler_default_params),
    ENTRY(cllm_sampler_new),
    ENTRY(cllm_sampler_new_model),
    ENTRY(cllm_sampler_params_check),
    ENTRY(cllm_sampler_free),
    ENTRY(cllm_sampler_sample),
    ENTRY(cllm_sampler_probs),
    ENTRY(cllm_sampler_accept),
    ENTRY(cllm_sampler_accept_prompt),
    ENTRY(cllm_sampler_reset),
    ENTRY(cllm_sampler_grammar_on),
    ENTRY(cllm_json_schema_to_grammar),
    ENTRY(cllm_json_grammar),
    ENTRY(cllm_stop_reason_str),
    ENTRY(cllm_generate),
    ENTRY(cllm_generate_result_free),
    ENTRY(cllm_generate_spec),
    ENTRY(cllm_spec_default_params),
    ENTRY(cllm_spec_params_check),
    ENTRY(cllm_spec_type_str),
    ENTRY(cllm_spec_type_parse),
    ENTRY(cllm_spec_ngram_draft),
    ENTRY(cllm_draft_new),
    ENTRY(cllm_draft_free),
    ENTRY(cllm_draft_session),
    ENTRY(cllm_request_default_params),
    ENTRY(cllm_engine_new),
    ENTRY(cllm_engine_new_session),
    ENTRY(cllm_engine_free),
    ENTRY(cllm_engine_submit),
    ENTRY(cllm_engine_submit_embed),
    ENTRY(cllm_engine_cancel),
    ENTRY(cllm_engine_step),
    ENTRY(cllm_engine_n_waiting),
    ENTRY(cllm_engine_n_running),
    ENTRY(cllm_engine_session),
    ENTRY(cllm_pipe_plan_file),
    ENTRY(cllm_pipe_plan_print),
    ENTRY(cllm_pipe_have_mpi),
    ENTRY(cllm_pipe_launched),
    ENTRY(cllm_pipe_init),
    ENTRY(cllm_pipe_any_thread),
    ENTRY(cllm_pipe_finalize),
    ENTRY(cllm_pipe_default_opts),
    ENTRY(cllm_pipe_open),
    ENTRY(cllm_pipe_rank),
    ENTRY(cllm_pipe_size),
    ENTRY(cllm_pipe_get_plan),
    ENTRY(cllm_pipe_model),
    ENTRY(cllm_pipe_session),
    ENTRY(cllm_pipe_n_seq),
    ENTRY(cllm_pipe_serve),
    ENTRY(cllm_pipe_close),
    ENTRY(cllm_pipe_comm_seconds),
    ENTRY(cllm_pipe_bytes_sent),
    ENTRY(cllm_pipe_gather_stats),
    ENTRY(cllm_pipe_measure_transfer),
    ENTRY(cllm_pipe_free),
};

/* Errors are expected here; keep them off stderr. */
static void quiet_log(cllm_log_level level, const char *msg, void *user_data) {
    (void)level, (void)msg, (void)user_data;
}

/* Runs one case in a child; a crash or an abort is a failure named after
 * the function. Returns the child's failed checks (or 1 for a crash). */
static int run_case(const null_case *c) {
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        cllm_log_set(quiet_log, NULL);
        c->run();
        fflush(stdout);
        _exit(g_checks_failed > 0 ? 1 : 0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) {
        fprintf(stderr, "test_null: %s: cannot run it\n", c->name);
        return 1;
    }
    if (WIFSIGNALED(status)) {
        fprintf(stderr, "test_null: %s: killed by signal %d (%s)\n", c->name, WTERMSIG(status),
                strsignal(WTERMSIG(status)));
        return 1;
    }
    if (WEXITSTATUS(status) != 0) {
        fprintf(stderr, "test_null: %s: failed\n", c->name);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    cllm_log_set(quiet_log, NULL);
    static const char *const files[] = {"stories260K.gguf", NULL};
    char path[4096];
    if (refs_have(files)) {
        if (cllm_model_load(refs_model_path(path, sizeof(path), "stories260K.gguf"), NULL,
                            &g_model) != CLLM_OK) {
            fprintf(stderr, "test_null: %s\n", cllm_last_error());
            return 1;
        }
        cllm_session_params sp = cllm_session_default_params();
        sp.n_ctx = 64;
        const cllm_sampler_params smp = cllm_sampler_default_params();
        CHECK(cllm_session_new(g_model, &sp, &g_session) == CLLM_OK);
        CHECK(cllm_sampler_new_model(&smp, g_model, &g_sampler) == CLLM_OK);
    }
    int failed = 0;
    const size_t n = sizeof(k_cases) / sizeof(k_cases[0]);
    for (size_t i = 0; i < n; i++) {
        if (argc > 1 && strcmp(argv[1], k_cases[i].name) != 0) continue;
        failed += run_case(&k_cases[i]);
    }
    CHECKF(failed == 0, "%d of %zu functions break the NULL rule", failed, n);
    cllm_sampler_free(g_sampler);
    cllm_session_free(g_session);
    cllm_model_free(g_model);
    return check_summary("test_null");
}
