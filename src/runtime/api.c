/*
 * Thin public wrappers (cllm.h) over the layers below: devices, GGUF
 * metadata as text, model queries, tokenization through the model's
 * tokenizer, and chat-template application. No state of their own.
 */
#include "core/hostmem.h"
#include "backend/backend.h"
#include "gguf/gguf.h"
#include "text/chat.h"
#include "runtime/model.h"
#include "runtime/session.h"
#include "text/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- devices ----------------------------------------------------------- */

int cllm_device_count(void) { return cllm_registry_device_count(); }

cllm_device *cllm_device_get(int i) {
    if (i < 0 || i >= cllm_registry_device_count()) return NULL;
    return cllm_registry_device(i);
}

cllm_status cllm_device_enable_test(const char *spec) {
    if (!spec) return cllm_error(CLLM_ERR_INVALID_ARG, "test device: no options given");
    /* the test device is no part of the library: its module takes the spec */
    return cllm_registry_configure("test", spec);
}

/* The CPU device's own report (its backend knows the machine). */
static cllm_device_props cpu_props(void) {
    cllm_device_props props = {.n_cores = 1, .n_threads_max = 1, .features = ""};
    cllm_device *cpu = cllm_registry_device_by_kind(CLLM_DEVICE_CPU);
    if (cpu) cllm_device_get_props(cpu, &props);
    return props;
}

int cllm_cpu_physical_cores(void) { return cpu_props().n_cores; }

const char *cllm_cpu_features(void) { return cpu_props().features; }

/* ---- GGUF metadata ----------------------------------------------------- */

size_t cllm_gguf_val_to_str(const cllm_gguf *g, int64_t i, char *buf, size_t size) {
    if (!g) {
        if (buf && size > 0) buf[0] = '\0';
        return 0;
    }
    CLLM_ASSERT(i >= 0 && i < cllm_gguf_n_kv(g));
    char tmp[1];
    if (!buf || size == 0) buf = tmp, size = 1;
    int n;
    switch (cllm_gguf_kv_type(g, i)) {
    case CLLM_GGUF_UINT8: n = snprintf(buf, size, "%u", cllm_gguf_val_u8(g, i)); break;
    case CLLM_GGUF_INT8: n = snprintf(buf, size, "%d", cllm_gguf_val_i8(g, i)); break;
    case CLLM_GGUF_UINT16: n = snprintf(buf, size, "%u", cllm_gguf_val_u16(g, i)); break;
    case CLLM_GGUF_INT16: n = snprintf(buf, size, "%d", cllm_gguf_val_i16(g, i)); break;
    case CLLM_GGUF_UINT32: n = snprintf(buf, size, "%u", cllm_gguf_val_u32(g, i)); break;
    case CLLM_GGUF_INT32: n = snprintf(buf, size, "%d", cllm_gguf_val_i32(g, i)); break;
    case CLLM_GGUF_UINT64:
        n = snprintf(buf, size, "%llu", (unsigned long long)cllm_gguf_val_u64(g, i));
        break;
    case CLLM_GGUF_INT64:
        n = snprintf(buf, size, "%lld", (long long)cllm_gguf_val_i64(g, i));
        break;
    case CLLM_GGUF_FLOAT32: n = snprintf(buf, size, "%g", (double)cllm_gguf_val_f32(g, i)); break;
    case CLLM_GGUF_FLOAT64: n = snprintf(buf, size, "%g", cllm_gguf_val_f64(g, i)); break;
    case CLLM_GGUF_BOOL:
        n = snprintf(buf, size, "%s", cllm_gguf_val_bool(g, i) ? "true" : "false");
        break;
    case CLLM_GGUF_STRING: {
        /* strings may hold NUL bytes: copy by length, report the length */
        const size_t len = cllm_gguf_val_str_len(g, i);
        const size_t k = CLLM_MIN(len, size - 1);
        memcpy(buf, cllm_gguf_val_str(g, i), k);
        buf[k] = 0;
        return len;
    }
    case CLLM_GGUF_ARRAY:
        n = snprintf(buf, size, "[%s x %llu]", cllm_gguf_type_name(cllm_gguf_arr_type(g, i)),
                     (unsigned long long)cllm_gguf_arr_n(g, i));
        break;
    default: n = snprintf(buf, size, "?"); break;
    }
    return n > 0 ? (size_t)n : 0;
}

const char *cllm_gguf_kv_type_str(const cllm_gguf *g, int64_t i) {
    if (!g) return NULL;
    return cllm_gguf_type_name(cllm_gguf_kv_type(g, i));
}

cllm_tensor_desc cllm_gguf_tensor_desc(const cllm_gguf *g, int64_t i) {
    if (!g) return (cllm_tensor_desc){0};
    const cllm_gguf_tensor_info *t = cllm_gguf_tensor(g, i); /* asserts the range */
    cllm_tensor_desc d = {.name = t->name,
                          .type = t->type,
                          .n_dims = t->n_dims,
                          .offset = t->offset,
                          .bytes = t->size};
    memcpy(d.ne, t->ne, sizeof(d.ne));
    return d;
}

/* ---- models ------------------------------------------------------------ */

int32_t cllm_model_n_vocab(const cllm_model *m) { return m ? (int32_t)m->hp.n_vocab : 0; }

int64_t cllm_model_n_ctx_train(const cllm_model *m) { return m ? m->hp.n_ctx_train : 0; }

int64_t cllm_model_n_layer(const cllm_model *m) { return m ? m->hp.n_layer : 0; }

int64_t cllm_model_n_embd(const cllm_model *m) { return m ? m->hp.n_embd : 0; }

const char *cllm_model_arch(const cllm_model *m) {
    if (!m) return NULL;
    return m->arch ? m->arch->name : m->hp.arch;
}

const cllm_gguf *cllm_model_gguf(const cllm_model *m) { return m ? m->gguf : NULL; }

/* ---- embeddings ---------------------------------------------------------- */

static const char *const k_pooling_names[] = {
    [CLLM_POOLING_NONE] = "none",
    [CLLM_POOLING_MEAN] = "mean",
    [CLLM_POOLING_CLS] = "cls",
    [CLLM_POOLING_LAST] = "last",
};
_Static_assert(CLLM_ARRAY_SIZE(k_pooling_names) == CLLM_POOLING_COUNT, "pooling names");

const char *cllm_pooling_str(cllm_pooling p) {
    return (unsigned)p < CLLM_POOLING_COUNT ? k_pooling_names[p] : "unknown";
}

cllm_status cllm_pooling_parse(const char *name, cllm_pooling *out) {
    if (!name) return CLLM_NULL_ARG("name");
    if (!out) return CLLM_NULL_ARG("out");
    for (int i = 0; i < CLLM_POOLING_COUNT; i++) {
        if (strcmp(name, k_pooling_names[i]) == 0) {
            *out = (cllm_pooling)i;
            return CLLM_OK;
        }
    }
    return cllm_error(CLLM_ERR_INVALID_ARG, "pooling \"%s\" is not one of none, mean, cls, last",
                      name);
}

cllm_pooling cllm_model_pooling(const cllm_model *m) {
    if (!m) return CLLM_POOLING_MEAN;
    char key[96];
    snprintf(key, sizeof(key), "%s.pooling_type", cllm_model_arch(m));
    const int64_t i = cllm_gguf_find_key(m->gguf, key);
    int64_t v = -1; /* llama.cpp writes a uint32 */
    if (i >= 0 && cllm_gguf_kv_type(m->gguf, i) == CLLM_GGUF_UINT32)
        v = cllm_gguf_val_u32(m->gguf, i);
    if (i >= 0 && cllm_gguf_kv_type(m->gguf, i) == CLLM_GGUF_INT32)
        v = cllm_gguf_val_i32(m->gguf, i);
    return v >= 0 && v < CLLM_POOLING_COUNT ? (cllm_pooling)v : CLLM_POOLING_MEAN;
}

void cllm_embd_normalize(float *v, int64_t n, int norm) {
    if (!v || norm < 0 || n <= 0) return;
    double sum = 0.0;
    if (norm == 0) { /* the largest magnitude to the int16 range */
        for (int64_t i = 0; i < n; i++) sum = fmax(sum, fabs((double)v[i]));
        sum /= 32760.0;
    } else if (norm == 1) {
        for (int64_t i = 0; i < n; i++) sum += fabs((double)v[i]);
    } else if (norm == 2) {
        for (int64_t i = 0; i < n; i++) sum += (double)v[i] * (double)v[i];
        sum = sqrt(sum);
    } else {
        for (int64_t i = 0; i < n; i++) sum += pow(fabs((double)v[i]), norm);
        sum = pow(sum, 1.0 / norm);
    }
    if (!(sum > 0.0)) return;
    for (int64_t i = 0; i < n; i++) v[i] = (float)((double)v[i] / sum);
}

int64_t cllm_model_meta_str(const cllm_model *m, const char *key, char *buf, size_t size) {
    const int64_t i = m && key ? cllm_gguf_find_key(m->gguf, key) : -1;
    if (i < 0) return -1;
    return (int64_t)cllm_gguf_val_to_str(m->gguf, i, buf, size);
}

const char *cllm_model_chat_template(const cllm_model *m) {
    if (!m) return NULL;
    const int64_t i = cllm_gguf_find_key(m->gguf, "tokenizer.chat_template");
    if (i < 0 || cllm_gguf_kv_type(m->gguf, i) != CLLM_GGUF_STRING) return NULL;
    return cllm_gguf_val_str(m->gguf, i);
}

/* ---- tokens ------------------------------------------------------------ */

static cllm_status no_tokenizer(const cllm_model *m) {
    return cllm_error(CLLM_ERR_UNSUPPORTED, "%s: the file has no tokenizer (tokenizer.ggml.*)",
                      m->path);
}

cllm_status cllm_tokenize(const cllm_model *m, const char *text, size_t len, bool add_special,
                          bool parse_special, int32_t *ids, size_t max_ids, size_t *n_ids) {
    if (!m || (!text && len > 0) || (!ids && max_ids > 0) || !n_ids) {
        return CLLM_NULL_ARG("the model, text, ids or n_ids");
    }
    if (!m->tok) return no_tokenizer(m);
    return cllm_tokenizer_encode(m->tok, text, len, add_special, parse_special, ids, max_ids,
                                 n_ids);
}

const char *cllm_token_to_piece(const cllm_model *m, int32_t id, bool special, size_t *len) {
    if (!m || !len) return NULL;
    return m->tok ? cllm_tokenizer_token_to_piece(m->tok, id, special, len) : NULL;
}

cllm_status cllm_detokenize(const cllm_model *m, const int32_t *ids, size_t n_ids, int flags,
                            char *buf, size_t cap, size_t *len) {
    if (!m || (!ids && n_ids > 0) || !len) return CLLM_NULL_ARG("the model, ids or len");
    if (!m->tok) return no_tokenizer(m);
    return cllm_tokenizer_decode(m->tok, ids, n_ids, flags, buf, cap, len);
}

cllm_status cllm_detokenizer_new(const cllm_model *m, int flags, cllm_detokenizer **out) {
    if (!m || !out) return CLLM_NULL_ARG("the model or out");
    if (!m->tok) return no_tokenizer(m);
    return cllm_detokenizer_new_tok(m->tok, flags, out);
}

int32_t cllm_token_bos(const cllm_model *m) {
    return m && m->tok ? cllm_tokenizer_bos(m->tok) : -1;
}

int32_t cllm_token_eos(const cllm_model *m) {
    return m && m->tok ? cllm_tokenizer_eos(m->tok) : -1;
}

int32_t cllm_token_eot(const cllm_model *m) {
    return m && m->tok ? cllm_tokenizer_eot(m->tok) : -1;
}

bool cllm_token_is_eog(const cllm_model *m, int32_t id) {
    return m && m->tok && cllm_tokenizer_is_eog(m->tok, id);
}

bool cllm_token_add_bos(const cllm_model *m) {
    return m && m->tok && cllm_tokenizer_add_bos(m->tok);
}

/* ---- chat -------------------------------------------------------------- */

/* A new NUL-terminated copy of token id's text, or "" for none; NULL out of memory. */
static char *token_text_dup(const cllm_model *m, int32_t id) {
    size_t len = 0;
    const char *t = m->tok && id >= 0 ? cllm_tokenizer_token_text(m->tok, id, &len) : NULL;
    if (!t) len = 0;
    char *s = cllm_malloc(len + 1);
    if (!s) return NULL;
    if (len) memcpy(s, t, len);
    s[len] = '\0';
    return s;
}

/*
 * Renders the file's template with the messages, then keeps the promise of
 * cllm_chat_style_has_bos_text(style): the text starts with the BOS token's
 * text when the style says so, and a BOS the template printed (bos_token)
 * goes when it does not (callers tokenize with add_special only then), so
 * a template that prints bos_token and one that leaves it to the tokenizer
 * both give one BOS.
 */
static cllm_status apply_template(const cllm_model *m, const char *tmpl, cllm_chat_style style,
                                  const cllm_chat_msg *msgs, size_t n, bool gen, char **out,
                                  size_t *out_len) {
    char *bos = token_text_dup(m, m->tok ? cllm_tokenizer_bos(m->tok) : -1);
    char *eos = token_text_dup(m, m->tok ? cllm_tokenizer_eos(m->tok) : -1);
    char *text = NULL;
    size_t len = 0;
    cllm_status st = CLLM_OK;
    if (!bos || !eos) {
        st = cllm_error(CLLM_ERR_NOMEM, "chat: out of host memory");
        goto done;
    }
    st = cllm_chat_render_template(tmpl, msgs, n, gen, bos, eos, &text, &len);
    if (st != CLLM_OK) goto done;
    const size_t bl = strlen(bos);
    const bool has = bl && len >= bl && memcmp(text, bos, bl) == 0;
    const bool want = cllm_chat_style_has_bos_text(style) && bl;
    /* only a BOS the template printed goes: SmolLM2's BOS is "<|im_start|>" */
    if (has && !want && strstr(tmpl, "bos_token")) {
        memmove(text, text + bl, len - bl + 1);
        len -= bl;
    } else if (!has && want) {
        char *t = cllm_malloc(len + bl + 1);
        if (!t) {
            st = cllm_error(CLLM_ERR_NOMEM, "chat: out of host memory");
            goto done;
        }
        memcpy(t, bos, bl);
        memcpy(t + bl, text, len + 1);
        cllm_free(text);
        text = t;
        len += bl;
    }
    *out = text;
    text = NULL;
    if (out_len) *out_len = len;
done:
    cllm_free(text);
    cllm_free(bos);
    cllm_free(eos);
    return st;
}

cllm_status cllm_chat_apply(const cllm_model *m, const char *style_name, const cllm_chat_msg *msgs,
                            size_t n, bool add_assistant_prompt, char **out, size_t *out_len,
                            cllm_chat_style *style_out) {
    if (!m || !out) return CLLM_NULL_ARG("the model or out");
    const char *tmpl = cllm_model_chat_template(m);
    cllm_chat_style style;
    /* Gemma files converted without a template (gemma-3-270m's GGUF has
     * none) still have the turn markers of Gemma's one template */
    const bool gemma_markers =
        !strncmp(m->hp.arch, "gemma", 5) && m->tok &&
        cllm_tokenizer_find(m->tok, "<start_of_turn>", strlen("<start_of_turn>")) >= 0 &&
        cllm_tokenizer_find(m->tok, "<end_of_turn>", strlen("<end_of_turn>")) >= 0;
    if (style_name) {
        CLLM_TRY(cllm_chat_style_from_name(style_name, &style));
    } else if ((!tmpl || !*tmpl) && gemma_markers) {
        style = CLLM_CHAT_STYLE_GEMMA;
    } else if (!tmpl || !*tmpl) {
        return cllm_error(
            CLLM_ERR_INVALID_ARG,
            "%s: the file has no chat template (tokenizer.chat_template) and no style "
            "was named",
            m->path);
    } else {
        CLLM_TRY(cllm_chat_style_detect(tmpl, &style));
    }
    if (!msgs || n == 0) return cllm_error(CLLM_ERR_INVALID_ARG, "chat: no messages");

    /* the file's own template, through the Jinja interpreter */
    if (!style_name && tmpl && *tmpl) {
        cllm_status jst =
            apply_template(m, tmpl, style, msgs, n, add_assistant_prompt, out, out_len);
        if (jst == CLLM_OK) {
            if (style_out) *style_out = style;
            return CLLM_OK;
        }
        if (jst == CLLM_ERR_NOMEM) return jst;
        CLLM_LOG_WARN("%s: the chat template failed (%s); rendering the built-in %s format instead",
                      m->path, cllm_last_error(), cllm_chat_style_name(style));
    }

    /* the template's default system message, when the conversation has none */
    bool has_system = false;
    for (size_t i = 0; i < n; i++) has_system |= msgs[i].role && !strcmp(msgs[i].role, "system");
    char *def_sys = NULL;
    cllm_chat_msg *all = NULL;
    const cllm_chat_msg *use = msgs;
    size_t n_use = n;
    cllm_status st = CLLM_OK;
    if (!has_system && tmpl && style == CLLM_CHAT_STYLE_CHATML) {
        if ((st = cllm_chat_default_system(tmpl, &def_sys)) != CLLM_OK) goto fail;
    }
    if (def_sys) {
        all = cllm_malloc((n + 1) * sizeof(*all));
        if (!all) {
            st = cllm_error(CLLM_ERR_NOMEM, "chat: out of host memory");
            goto fail;
        }
        all[0] = (cllm_chat_msg){.role = "system", .content = def_sys};
        memcpy(all + 1, msgs, n * sizeof(*all));
        use = all, n_use = n + 1;
    }
    if ((st = cllm_chat_render_alloc(style, use, n_use, add_assistant_prompt, out, out_len)) !=
        CLLM_OK) {
        goto fail;
    }
    if (style_out) *style_out = style;
fail:
    cllm_free(all);
    cllm_free(def_sys);
    return st;
}
