/*
 * Tokenizer: loading and validating tokenizer.ggml.* metadata, the look-up
 * tables, special-token matching, the encode driver, pieces, decoding and the
 * streaming detokenizer. The merge algorithms are in tokenizer-spm.c and
 * tokenizer-bpe.c, the pre-tokenizers in pretok.c.
 */
#include "text/tokenizer-impl.h"
#include "core/hostmem.h"
#include "text/unicode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MODEL            "tokenizer.ggml.model"
#define KEY_PRE              "tokenizer.ggml.pre"
#define KEY_TOKENS           "tokenizer.ggml.tokens"
#define KEY_SCORES           "tokenizer.ggml.scores"
#define KEY_TOKEN_TYPE       "tokenizer.ggml.token_type"
#define KEY_MERGES           "tokenizer.ggml.merges"
#define KEY_BOS              "tokenizer.ggml.bos_token_id"
#define KEY_EOS              "tokenizer.ggml.eos_token_id"
#define KEY_ADD_BOS          "tokenizer.ggml.add_bos_token"
#define KEY_ADD_EOS          "tokenizer.ggml.add_eos_token"
#define KEY_ADD_SPACE_PREFIX "tokenizer.ggml.add_space_prefix"

/* ---- working memory ---- */

/* Grows *p (elements of `size` bytes) to hold at least n; false on OOM. */
static bool grow(void **p, size_t *cap, size_t n, size_t size) {
    if (n <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < n) {
        if (c > SIZE_MAX / 2) return false;
        c *= 2;
    }
    size_t bytes;
    if (cllm_mul_overflow(c, size, &bytes)) return false;
    void *q = cllm_realloc(*p, bytes);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

void cllm_tok_scratch_free(cllm_tok_scratch *s) {
    cllm_free(s->text);
    cllm_free(s->syms);
    cllm_free(s->heap);
    memset(s, 0, sizeof(*s));
}

bool cllm_tok_scratch_text(cllm_tok_scratch *s, size_t n) {
    return grow((void **)&s->text, &s->text_cap, n, 1);
}

bool cllm_tok_scratch_syms(cllm_tok_scratch *s, size_t n) {
    return grow((void **)&s->syms, &s->syms_cap, n, sizeof(cllm_tok_sym));
}

static bool bigram_before(const cllm_tok_bigram *a, const cllm_tok_bigram *b) {
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

bool cllm_tok_heap_push(cllm_tok_scratch *s, cllm_tok_bigram b) {
    if (!grow((void **)&s->heap, &s->heap_cap, s->heap_n + 1, sizeof(cllm_tok_bigram)))
        return false;
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_before(&b, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = b;
    return true;
}

bool cllm_tok_heap_pop(cllm_tok_scratch *s, cllm_tok_bigram *b) {
    if (s->heap_n == 0) return false;
    *b = s->heap[0];
    cllm_tok_bigram last = s->heap[--s->heap_n];
    size_t n = s->heap_n, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!bigram_before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n > 0) s->heap[i] = last;
    return true;
}

bool cllm_tok_merge(const cllm_tokenizer *tok, cllm_tok_scratch *s, int32_t n,
                    cllm_tok_try_pair_fn try_pair) {
    s->heap_n = 0;
    for (int32_t i = 0; i + 1 < n; i++) {
        if (!try_pair(tok, s, i, i + 1)) return false;
    }
    cllm_tok_bigram b;
    while (cllm_tok_heap_pop(s, &b)) {
        cllm_tok_sym *l = &s->syms[b.left];
        cllm_tok_sym *r = &s->syms[b.right];
        /* Stale: one side was merged away or has grown since. */
        if (l->len == 0 || r->len == 0 || l->len + r->len != b.len) continue;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) s->syms[r->next].prev = b.left;
        if (!try_pair(tok, s, l->prev, b.left)) return false;
        if (!try_pair(tok, s, b.left, l->next)) return false;
    }
    return true;
}

/* ---- look-up tables ---- */

static size_t table_size(size_t n) {
    size_t c = 16;
    while (c < 2 * n) c *= 2;
    return c;
}

static const char *tok_text(const cllm_tokenizer *tok, int32_t id) {
    return tok->text_pool + tok->tokens[id].text_off;
}

int32_t cllm_tok_lookup(const cllm_tokenizer *tok, const char *s, size_t n) {
    size_t i = (size_t)cllm_tok_hash(CLLM_TOK_HASH_INIT, s, n) & tok->map_mask;
    for (;; i = (i + 1) & tok->map_mask) {
        int32_t id = tok->map[i];
        if (id < 0) return -1;
        if (tok->tokens[id].text_len == n && memcmp(tok_text(tok, id), s, n) == 0) return id;
    }
}

/* Inserts id; a token with the same text is replaced (the later id wins, as
 * in llama.cpp) and returned; -1 when the text is new. */
static int32_t map_insert(cllm_tokenizer *tok, int32_t id) {
    const cllm_token_data *t = &tok->tokens[id];
    const char *s = tok_text(tok, id);
    size_t i = (size_t)cllm_tok_hash(CLLM_TOK_HASH_INIT, s, t->text_len) & tok->map_mask;
    for (;; i = (i + 1) & tok->map_mask) {
        int32_t o = tok->map[i];
        if (o < 0 || (tok->tokens[o].text_len == t->text_len &&
                      memcmp(tok_text(tok, o), s, t->text_len) == 0)) {
            tok->map[i] = id;
            return o;
        }
    }
}

static uint64_t merge_hash(const char *left, size_t ln, const char *right, size_t rn) {
    uint64_t h = cllm_tok_hash(CLLM_TOK_HASH_INIT, left, ln);
    h = cllm_tok_hash(h, " ", 1);
    return cllm_tok_hash(h, right, rn);
}

static bool merge_equal(const cllm_tokenizer *tok, int32_t r, const char *left, size_t ln,
                        const char *right, size_t rn) {
    const char *m = tok->merge_pool + tok->merge_off[r];
    return tok->merge_left[r] == ln && tok->merge_len[r] == ln + 1 + rn &&
           memcmp(m, left, ln) == 0 && memcmp(m + ln + 1, right, rn) == 0;
}

int32_t cllm_tok_merge_rank(const cllm_tokenizer *tok, const char *left, size_t left_len,
                            const char *right, size_t right_len) {
    if (tok->n_merges == 0) return -1;
    size_t i = (size_t)merge_hash(left, left_len, right, right_len) & tok->merge_mask;
    for (;; i = (i + 1) & tok->merge_mask) {
        int32_t r = tok->merge_map[i];
        if (r < 0) return -1;
        if (merge_equal(tok, r, left, left_len, right, right_len)) return r;
    }
}

/* Inserts merge r unless the same pair is already there (the first rank wins). */
static void merge_insert(cllm_tokenizer *tok, int32_t r) {
    const char *m = tok->merge_pool + tok->merge_off[r];
    size_t ln = tok->merge_left[r], rn = tok->merge_len[r] - ln - 1;
    size_t i = (size_t)merge_hash(m, ln, m + ln + 1, rn) & tok->merge_mask;
    for (;; i = (i + 1) & tok->merge_mask) {
        int32_t o = tok->merge_map[i];
        if (o < 0) {
            tok->merge_map[i] = r;
            return;
        }
        if (merge_equal(tok, o, m, ln, m + ln + 1, rn)) return;
    }
}

/* ---- loading ---- */

static const char *gguf_type_str(cllm_gguf_type t) {
    return t < CLLM_GGUF_TYPE_COUNT ? cllm_gguf_type_name(t) : "?";
}

/* Finds `key` as an array whose element type is `want` (or `want2`, if not
 * `want`). *idx = -1 when absent and not required. */
static cllm_status find_array(const cllm_gguf *g, const char *key, cllm_gguf_type want,
                              cllm_gguf_type want2, bool required, int64_t *idx, uint64_t *n) {
    int64_t i = cllm_gguf_find_key(g, key);
    if (i < 0) {
        if (required) return cllm_error(CLLM_ERR_FORMAT, "%s: %s: missing", cllm_gguf_name(g), key);
        *idx = -1;
        *n = 0;
        return CLLM_OK;
    }
    cllm_gguf_type t = cllm_gguf_kv_type(g, i);
    if (t != CLLM_GGUF_ARRAY)
        return cllm_error(CLLM_ERR_FORMAT, "%s: %s: expected an array of %s, found %s",
                          cllm_gguf_name(g), key, gguf_type_str(want), gguf_type_str(t));
    cllm_gguf_type at = cllm_gguf_arr_type(g, i);
    if (at != want && at != want2)
        return cllm_error(CLLM_ERR_FORMAT, "%s: %s: expected an array of %s, found an array of %s",
                          cllm_gguf_name(g), key, gguf_type_str(want), gguf_type_str(at));
    *idx = i;
    *n = cllm_gguf_arr_n(g, i);
    return CLLM_OK;
}

/* Reads an optional token id. Absent keeps *id; 0xFFFFFFFF (how uint32
 * keys say "none") means none (-1); a negative value also means none, with
 * a warning (the keys are uint32). Out of range: an error when `strict`,
 * else a warning and none. */
static cllm_status read_id(const cllm_gguf *g, const char *key, int32_t n_vocab, bool strict,
                           int32_t *id) {
    if (cllm_gguf_find_key(g, key) < 0) return CLLM_OK;
    int64_t v;
    cllm_status st = cllm_gguf_get_i64(g, key, &v);
    if (st != CLLM_OK) return st;
    if (v < 0) {
        CLLM_LOG_WARN("%s: %s: token id %lld is negative; taken as no such token",
                      cllm_gguf_name(g), key, (long long)v);
        *id = -1;
    } else if (v == (int64_t)UINT32_MAX) {
        *id = -1;
    } else if (v >= n_vocab) {
        if (strict)
            return cllm_error(CLLM_ERR_FORMAT, "%s: %s: token id %lld is out of range (%d tokens)",
                              cllm_gguf_name(g), key, (long long)v, n_vocab);
        CLLM_LOG_WARN("%s: %s: token id %lld is out of range (%d tokens); ignored",
                      cllm_gguf_name(g), key, (long long)v, n_vocab);
        *id = -1;
    } else {
        *id = (int32_t)v;
    }
    return CLLM_OK;
}

/* The error for a BOS or EOS token that is to be added but does not exist,
 * naming both causes: why it is added (add_key true, or the SentencePiece
 * default when add_key is absent) and why there is none (id_key absent with
 * the default id `def` (-1: none) outside the vocabulary, or set to none). */
static cllm_status no_token_to_add(const cllm_gguf *g, const char *what, const char *add_key,
                                   const char *id_key, int32_t def, int32_t n_vocab) {
    char why_add[160], why_none[160] = "";
    if (cllm_gguf_find_key(g, add_key) >= 0) {
        snprintf(why_add, sizeof(why_add), "%s is true", add_key);
    } else {
        snprintf(why_add, sizeof(why_add),
                 "a SentencePiece vocabulary adds one unless %s is false (it is not set)", add_key);
    }
    int64_t v = 0;
    if (cllm_gguf_find_key(g, id_key) < 0) {
        if (def >= 0) {
            snprintf(why_none, sizeof(why_none),
                     "%s is not set and the default id %d is outside the vocabulary of %d token%s",
                     id_key, (int)def, (int)n_vocab, n_vocab == 1 ? "" : "s");
        } else {
            snprintf(why_none, sizeof(why_none), "%s is not set", id_key);
        }
    } else if (cllm_gguf_get_i64(g, id_key, &v) == CLLM_OK) {
        snprintf(why_none, sizeof(why_none), "%s is %lld (no such token)", id_key, (long long)v);
    }
    return cllm_error(CLLM_ERR_FORMAT, "%s: no %s token to add: %s, but %s", cllm_gguf_name(g),
                      what, why_add, why_none);
}

static cllm_status read_bool(const cllm_gguf *g, const char *key, bool *out) {
    if (cllm_gguf_find_key(g, key) < 0) return CLLM_OK;
    return cllm_gguf_get_bool(g, key, out);
}

/* Validates one string from the file: length limit, no NUL, valid UTF-8. */
static cllm_status check_string(const cllm_gguf *g, const char *key, const char *what, uint64_t j,
                                const char *s, size_t len, size_t max_len) {
    if (len > max_len)
        return cllm_error(CLLM_ERR_FORMAT, "%s: %s: %s %llu is %zu bytes long (limit %zu)",
                          cllm_gguf_name(g), key, what, (unsigned long long)j, len, max_len);
    if (memchr(s, '\0', len))
        return cllm_error(CLLM_ERR_FORMAT, "%s: %s: %s %llu holds a NUL byte", cllm_gguf_name(g),
                          key, what, (unsigned long long)j);
    if (!cllm_utf8_valid(s, len))
        return cllm_error(CLLM_ERR_FORMAT, "%s: %s: %s %llu is not valid UTF-8", cllm_gguf_name(g),
                          key, what, (unsigned long long)j);
    return CLLM_OK;
}

/* Copies and checks the token texts, scores and types. */
static cllm_status load_tokens(cllm_tokenizer *tok, const cllm_gguf *g) {
    int64_t ti = -1, si = -1, yi = -1;
    uint64_t n = 0, ns = 0, ny = 0;
    cllm_status st = find_array(g, KEY_TOKENS, CLLM_GGUF_STRING, CLLM_GGUF_STRING, true, &ti, &n);
    if (st != CLLM_OK) return st;
    if (n == 0 || n > (uint64_t)INT32_MAX - 1)
        return cllm_error(CLLM_ERR_FORMAT, "%s: %s: %llu tokens (expected 1 to %d)",
                          cllm_gguf_name(g), KEY_TOKENS, (unsigned long long)n, INT32_MAX - 1);
    st = find_array(g, KEY_SCORES, CLLM_GGUF_FLOAT32, CLLM_GGUF_FLOAT32, false, &si, &ns);
    if (st != CLLM_OK) return st;
    if (si >= 0 && ns != n)
        return cllm_error(CLLM_ERR_FORMAT, "%s: %s: %llu scores for %llu tokens", cllm_gguf_name(g),
                          KEY_SCORES, (unsigned long long)ns, (unsigned long long)n);
    st = find_array(g, KEY_TOKEN_TYPE, CLLM_GGUF_INT32, CLLM_GGUF_UINT32, false, &yi, &ny);
    if (st != CLLM_OK) return st;
    if (yi >= 0 && ny != n)
        return cllm_error(CLLM_ERR_FORMAT, "%s: %s: %llu types for %llu tokens", cllm_gguf_name(g),
                          KEY_TOKEN_TYPE, (unsigned long long)ny, (unsigned long long)n);

    tok->n_vocab = (int32_t)n;
    tok->tokens = cllm_calloc(n, sizeof(cllm_token_data));
    if (!tok->tokens) goto nomem;

    size_t total = 0;
    for (uint64_t j = 0; j < n; j++) {
        size_t len = 0;
        const char *s = cllm_gguf_arr_str(g, ti, j, &len);
        st = check_string(g, KEY_TOKENS, "token", j, s, len, CLLM_TOKENIZER_MAX_TOKEN_BYTES);
        if (st != CLLM_OK) return st;
        if (cllm_add_overflow(total, len + 1, &total)) goto nomem;
    }
    /* Pieces are never longer than texts (see make_pieces), plus room for
     * the U+FFFD of unknown tokens. */
    tok->text_pool = cllm_malloc(total);
    tok->piece_pool = cllm_malloc(total);
    if (!tok->text_pool || !tok->piece_pool) goto nomem;

    const unsigned char *scores = si >= 0 ? cllm_gguf_arr_data(g, si) : NULL;
    const unsigned char *types = yi >= 0 ? cllm_gguf_arr_data(g, yi) : NULL;
    size_t off = 0;
    for (uint64_t j = 0; j < n; j++) {
        cllm_token_data *t = &tok->tokens[j];
        size_t len = 0;
        const char *s = cllm_gguf_arr_str(g, ti, j, &len);
        memcpy(tok->text_pool + off, s, len);
        tok->text_pool[off + len] = '\0';
        t->text_off = off;
        t->text_len = (uint32_t)len;
        off += len + 1;
        if (scores) {
            memcpy(&t->score, scores + 4 * j, 4);
            if (isnan(t->score))
                return cllm_error(CLLM_ERR_FORMAT, "%s: %s: score %llu is NaN", cllm_gguf_name(g),
                                  KEY_SCORES, (unsigned long long)j);
        }
        int32_t type = CLLM_TOKEN_TYPE_NORMAL;
        if (types) {
            memcpy(&type, types + 4 * j, 4);
            if (type < 0 || type >= CLLM_TOKEN_TYPE_COUNT)
                return cllm_error(CLLM_ERR_FORMAT,
                                  "%s: %s: token %llu has type %d (expected 0..%d)",
                                  cllm_gguf_name(g), KEY_TOKEN_TYPE, (unsigned long long)j, type,
                                  CLLM_TOKEN_TYPE_COUNT - 1);
        }
        t->type = (uint8_t)type;
        if (type == CLLM_TOKEN_TYPE_UNDEFINED || type == CLLM_TOKEN_TYPE_NORMAL ||
            type == CLLM_TOKEN_TYPE_USER_DEFINED)
            t->flags |= CLLM_TOKF_MATCHABLE;
    }

    tok->map_mask = table_size(n) - 1;
    tok->map = cllm_malloc((tok->map_mask + 1) * sizeof(int32_t));
    if (!tok->map) goto nomem;
    memset(tok->map, 0xFF, (tok->map_mask + 1) * sizeof(int32_t));
    /* Repeated texts are accepted (real vocabularies have them): encoding
     * gives the last id of a text, every id decodes to its own text. */
    int32_t n_dup = 0, dup_id = -1, dup_of = -1;
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        const int32_t o = map_insert(tok, id);
        if (o < 0) continue;
        if (n_dup++ == 0) dup_id = id, dup_of = o;
    }
    if (n_dup > 0)
        CLLM_LOG_WARN("%s: %s: %d token%s repeat%s the text of an earlier one (the first: id %d "
                      "repeats id %d); encoding gives the last id of each text",
                      cllm_gguf_name(g), KEY_TOKENS, n_dup, n_dup == 1 ? "" : "s",
                      n_dup == 1 ? "s" : "", dup_id, dup_of);
    return CLLM_OK;

nomem:
    return cllm_error(CLLM_ERR_NOMEM, "%s: out of memory for a vocabulary of %llu tokens",
                      cllm_gguf_name(g), (unsigned long long)n);
}

static cllm_status load_merges(cllm_tokenizer *tok, const cllm_gguf *g) {
    int64_t mi = -1;
    uint64_t n = 0;
    cllm_status st = find_array(g, KEY_MERGES, CLLM_GGUF_STRING, CLLM_GGUF_STRING, true, &mi, &n);
    if (st != CLLM_OK) return st;
    if (n > (uint64_t)INT32_MAX - 1)
        return cllm_error(CLLM_ERR_FORMAT, "%s: %s: %llu merges is too many", cllm_gguf_name(g),
                          KEY_MERGES, (unsigned long long)n);
    size_t total = 0;
    for (uint64_t j = 0; j < n; j++) {
        size_t len = 0;
        const char *s = cllm_gguf_arr_str(g, mi, j, &len);
        st = check_string(g, KEY_MERGES, "merge", j, s, len,
                          2 * (size_t)CLLM_TOKENIZER_MAX_TOKEN_BYTES + 1);
        if (st != CLLM_OK) return st;
        /* "left right": split at the first space after the first byte, so
         * that a left part may itself be a space. */
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp || sp == s + len - 1)
            return cllm_error(
                CLLM_ERR_FORMAT, "%s: %s: merge %llu (\"%.*s\") is not \"left right\"",
                cllm_gguf_name(g), KEY_MERGES, (unsigned long long)j, (int)CLLM_MIN(len, 64), s);
        if (cllm_add_overflow(total, len, &total)) goto nomem;
    }
    tok->n_merges = (int64_t)n;
    if (n == 0) return CLLM_OK;
    tok->merge_pool = cllm_malloc(total);
    tok->merge_off = cllm_malloc(n * sizeof(size_t));
    tok->merge_len = cllm_malloc(n * sizeof(uint32_t));
    tok->merge_left = cllm_malloc(n * sizeof(uint32_t));
    tok->merge_mask = table_size(n) - 1;
    tok->merge_map = cllm_malloc((tok->merge_mask + 1) * sizeof(int32_t));
    if (!tok->merge_pool || !tok->merge_off || !tok->merge_len || !tok->merge_left ||
        !tok->merge_map)
        goto nomem;
    memset(tok->merge_map, 0xFF, (tok->merge_mask + 1) * sizeof(int32_t));
    size_t off = 0;
    for (uint64_t j = 0; j < n; j++) {
        size_t len = 0;
        const char *s = cllm_gguf_arr_str(g, mi, j, &len);
        const char *sp = memchr(s + 1, ' ', len - 1);
        memcpy(tok->merge_pool + off, s, len);
        tok->merge_off[j] = off;
        tok->merge_len[j] = (uint32_t)len;
        tok->merge_left[j] = (uint32_t)(sp - s);
        off += len;
        merge_insert(tok, (int32_t)j);
    }
    return CLLM_OK;

nomem:
    return cllm_error(CLLM_ERR_NOMEM, "%s: out of memory for %llu merges", cllm_gguf_name(g),
                      (unsigned long long)n);
}

/* The value of a "<0xXX>" text, or -1. */
static int parse_byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Renders every token's piece into piece_pool (never longer than its text). */
static void make_pieces(cllm_tokenizer *tok) {
    size_t off = 0, max = CLLM_UTF8_REPLACEMENT_LEN;
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        cllm_token_data *t = &tok->tokens[id];
        const char *s = tok_text(tok, id);
        char *p = tok->piece_pool + off;
        size_t n = 0, len = t->text_len;
        int byte;
        if (t->type == CLLM_TOKEN_TYPE_CONTROL || t->type == CLLM_TOKEN_TYPE_UNKNOWN) {
            memcpy(p, s, len);
            n = len;
        } else if (tok->kind == CLLM_TOKENIZER_SPM) {
            if (t->type == CLLM_TOKEN_TYPE_BYTE && (byte = parse_byte_token(s, len)) >= 0) {
                p[n++] = (char)byte;
            } else {
                for (size_t i = 0; i < len;) {
                    if (i + 3 <= len && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
                        p[n++] = ' ';
                        i += 3;
                    } else {
                        p[n++] = s[i++];
                    }
                }
            }
        } else if (t->type == CLLM_TOKEN_TYPE_USER_DEFINED) {
            memcpy(p, s, len);
            n = len;
        } else {
            /* Byte-level: each code point that is a byte's image becomes the
             * byte; others (not made by byte-level BPE) stay as they are. */
            for (size_t i = 0; i < len;) {
                uint32_t cp;
                size_t cl = cllm_utf8_decode(s + i, len - i, &cp);
                if (cp < CLLM_ARRAY_SIZE(tok->cp_to_byte) && tok->cp_to_byte[cp] >= 0) {
                    p[n++] = (char)tok->cp_to_byte[cp];
                } else {
                    memcpy(p + n, s + i, cl);
                    n += cl;
                }
                i += cl;
            }
        }
        CLLM_ASSERT(n <= len);
        t->piece_off = off;
        t->piece_len = (uint32_t)n;
        off += len + 1;
        max = CLLM_MAX(max, n);
    }
    tok->max_piece_len = max;
}

static cllm_status build_trie(cllm_tokenizer *tok) {
    for (int b = 0; b < 256; b++) tok->root_child[b] = -1;
    size_t total = 0;
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        uint8_t y = tok->tokens[id].type;
        if (y == CLLM_TOKEN_TYPE_CONTROL || y == CLLM_TOKEN_TYPE_UNKNOWN ||
            y == CLLM_TOKEN_TYPE_USER_DEFINED)
            total += tok->tokens[id].text_len;
    }
    if (total == 0) return CLLM_OK;
    if (total > INT32_MAX) return cllm_error(CLLM_ERR_NOMEM, "tokenizer: special tokens too long");
    tok->trie = cllm_malloc(total * sizeof(cllm_trie_node));
    if (!tok->trie)
        return cllm_error(CLLM_ERR_NOMEM, "tokenizer: out of memory for special tokens");
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        const cllm_token_data *t = &tok->tokens[id];
        if (t->text_len == 0 ||
            (t->type != CLLM_TOKEN_TYPE_CONTROL && t->type != CLLM_TOKEN_TYPE_UNKNOWN &&
             t->type != CLLM_TOKEN_TYPE_USER_DEFINED))
            continue;
        const unsigned char *s = (const unsigned char *)tok_text(tok, id);
        int32_t *link = &tok->root_child[s[0]];
        int32_t node = -1;
        for (uint32_t k = 0; k < t->text_len; k++) {
            /* Find the child with byte s[k] in the list at *link, or add it. */
            if (k > 0) link = &tok->trie[node].child;
            while (*link >= 0 && tok->trie[*link].byte != s[k]) link = &tok->trie[*link].sibling;
            if (*link < 0) {
                int32_t m = tok->n_trie++;
                tok->trie[m] = (cllm_trie_node){-1, -1, -1, s[k]};
                *link = m;
            }
            node = *link;
        }
        tok->trie[node].id = id;
        if (t->type == CLLM_TOKEN_TYPE_USER_DEFINED) tok->n_user_defined++;
    }
    return CLLM_OK;
}

/* The longest special token at text[pos..len) that may be matched, or -1. */
static int32_t match_special(const cllm_tokenizer *tok, const char *text, size_t len, size_t pos,
                             bool parse_special, size_t *match_len) {
    int32_t best = -1;
    int32_t node = tok->root_child[(unsigned char)text[pos]];
    for (size_t k = 1; node >= 0; k++) {
        int32_t id = tok->trie[node].id;
        if (id >= 0 && (parse_special || tok->tokens[id].type == CLLM_TOKEN_TYPE_USER_DEFINED)) {
            best = id;
            *match_len = k;
        }
        if (pos + k >= len) break;
        unsigned char b = (unsigned char)text[pos + k];
        node = tok->trie[node].child;
        while (node >= 0 && tok->trie[node].byte != b) node = tok->trie[node].sibling;
    }
    return best;
}

/* Texts that end a turn (checked against control and user-defined tokens).
 * "</s>" is one for Phi-3, whose file marks it user-defined. */
static const char *const k_eog_texts[] = {
    "</s>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "<|return|>",
    "<|call|>",
    "<\xEF\xBD\x9C\x65nd\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", /* \x65: 'e' */
};

/* Texts that name an end-of-turn token, in order of preference, for files
 * without tokenizer.ggml.eot_token_id. */
static const char *const k_eot_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<EOT>",
    "_<EOT>",
    "<\xEF\xBD\x9C\x65nd\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", /* \x65: 'e' */
};

static int32_t find_turn_token(const cllm_tokenizer *tok, const char *text) {
    int32_t id = cllm_tok_lookup(tok, text, strlen(text));
    if (id < 0) return -1;
    uint8_t y = tok->tokens[id].type;
    return y == CLLM_TOKEN_TYPE_CONTROL || y == CLLM_TOKEN_TYPE_USER_DEFINED ? id : -1;
}

/* Whether no token that plain text may produce has U+2581 right after a
 * character other than U+2581 (see tokenizer-spm.c). */
static bool spm_words_independent(const cllm_tokenizer *tok) {
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        const cllm_token_data *t = &tok->tokens[id];
        if (!(t->flags & CLLM_TOKF_MATCHABLE)) continue;
        const char *s = tok_text(tok, id);
        for (size_t i = 1; i + 3 <= t->text_len; i++) {
            if (memcmp(s + i, "\xE2\x96\x81", 3) != 0) continue;
            if (i < 3 || memcmp(s + i - 3, "\xE2\x96\x81", 3) != 0) return false;
        }
    }
    return true;
}

/* Phi-3's special tokens eat the ASCII whitespace that follows them in the
 * text (Hugging Face's rstrip of its added tokens), except <unk>, <s> and
 * <|endoftext|>. llama.cpp applies it to a file whose general.name contains
 * "phi-3" or "phi3" (any case); so does this. */
static void phi3_rstrip(cllm_tokenizer *tok, const cllm_gguf *g) {
    const int64_t k = cllm_gguf_find_key(g, "general.name");
    if (k < 0 || cllm_gguf_kv_type(g, k) != CLLM_GGUF_STRING) return;
    char name[128];
    const char *s = cllm_gguf_val_str(g, k);
    size_t n = 0;
    for (; s[n] && n + 1 < sizeof(name); n++) {
        name[n] = (char)(s[n] >= 'A' && s[n] <= 'Z' ? s[n] - 'A' + 'a' : s[n]);
    }
    name[n] = '\0';
    if (!strstr(name, "phi-3") && !strstr(name, "phi3")) return;
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        const uint8_t y = tok->tokens[id].type;
        if (y == CLLM_TOKEN_TYPE_CONTROL || y == CLLM_TOKEN_TYPE_USER_DEFINED ||
            y == CLLM_TOKEN_TYPE_UNKNOWN)
            tok->tokens[id].flags |= CLLM_TOKF_RSTRIP;
    }
    static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
    const int32_t eos = cllm_tok_lookup(tok, "</s>", 4);
    if (eos >= 0) tok->tokens[eos].flags |= CLLM_TOKF_RSTRIP;
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(keep); i++) {
        const int32_t id = cllm_tok_lookup(tok, keep[i], strlen(keep[i]));
        if (id >= 0) tok->tokens[id].flags &= (uint8_t)~CLLM_TOKF_RSTRIP;
    }
}

static cllm_status load(cllm_tokenizer *tok, const cllm_gguf *g) {
    const char *name = cllm_gguf_name(g);
    const char *model;
    cllm_status st = cllm_gguf_get_str(g, KEY_MODEL, &model);
    if (st != CLLM_OK) return st;
    if (strcmp(model, "llama") == 0) {
        tok->kind = CLLM_TOKENIZER_SPM;
    } else if (strcmp(model, "gpt2") == 0) {
        tok->kind = CLLM_TOKENIZER_BPE;
    } else {
        return cllm_error(
            CLLM_ERR_UNSUPPORTED,
            "%s: %s: tokenizer model \"%s\" is not supported (supported: llama, gpt2)", name,
            KEY_MODEL, model);
    }

    if (tok->kind == CLLM_TOKENIZER_BPE) {
        tok->pretok = CLLM_PRETOK_GPT2;
        if (cllm_gguf_find_key(g, KEY_PRE) < 0) {
            CLLM_LOG_WARN("%s: %s: missing; using the GPT-2 pre-tokenizer", name, KEY_PRE);
        } else {
            const char *pre;
            st = cllm_gguf_get_str(g, KEY_PRE, &pre);
            if (st != CLLM_OK) return st;
            if (strcmp(pre, "default") == 0 || strcmp(pre, "gpt-2") == 0) {
                tok->pretok = CLLM_PRETOK_GPT2;
            } else if (strcmp(pre, "llama3") == 0 || strcmp(pre, "llama-bpe") == 0 ||
                       strcmp(pre, "llama-v3") == 0) {
                tok->pretok = CLLM_PRETOK_LLAMA3;
                tok->ignore_merges = true;
            } else if (strcmp(pre, "qwen2") == 0 || strcmp(pre, "deepseek-r1-qwen") == 0) {
                tok->pretok = CLLM_PRETOK_QWEN2;
            } else if (strcmp(pre, "smollm") == 0) {
                tok->pretok = CLLM_PRETOK_SMOLLM;
            } else {
                return cllm_error(CLLM_ERR_UNSUPPORTED,
                                  "%s: %s: pre-tokenizer \"%s\" is not supported (supported: "
                                  "default, gpt-2, llama3, llama-bpe, llama-v3, qwen2, "
                                  "deepseek-r1-qwen, smollm)",
                                  name, KEY_PRE, pre);
            }
        }
    }

    st = load_tokens(tok, g);
    if (st != CLLM_OK) return st;
    int32_t n = tok->n_vocab;

    if (tok->kind == CLLM_TOKENIZER_BPE) {
        cllm_tok_bpe_init_bytes(tok);
        st = load_merges(tok, g);
        if (st != CLLM_OK) return st;
    }
    for (int b = 0; b < 256; b++) {
        char t[7];
        static const char hex[] = "0123456789ABCDEF";
        memcpy(t, "<0x", 3);
        t[3] = hex[b >> 4];
        t[4] = hex[b & 15];
        t[5] = '>';
        t[6] = '\0';
        int32_t id = cllm_tok_lookup(tok, t, 6);
        if (id < 0 && b < 0x80) {
            char c = (char)b;
            id = cllm_tok_lookup_text(tok, &c, 1);
        }
        tok->byte_token[b] = tok->kind == CLLM_TOKENIZER_SPM ? id : -1;
    }

    if (tok->kind == CLLM_TOKENIZER_SPM) tok->spm_split_words = spm_words_independent(tok);

    /* Defaults, then the file. */
    tok->bos = tok->eos = tok->eot = tok->eom = tok->unk = tok->pad = -1;
    if (tok->kind == CLLM_TOKENIZER_SPM) {
        if (n > 0) tok->unk = 0;
        if (n > 1) tok->bos = 1;
        if (n > 2) tok->eos = 2;
        tok->add_bos = true;
        tok->add_space_prefix = true;
    }
    if ((st = read_id(g, KEY_BOS, n, true, &tok->bos)) != CLLM_OK ||
        (st = read_id(g, KEY_EOS, n, true, &tok->eos)) != CLLM_OK ||
        (st = read_id(g, "tokenizer.ggml.eot_token_id", n, true, &tok->eot)) != CLLM_OK ||
        (st = read_id(g, "tokenizer.ggml.eom_token_id", n, true, &tok->eom)) != CLLM_OK ||
        (st = read_id(g, "tokenizer.ggml.unknown_token_id", n, true, &tok->unk)) != CLLM_OK ||
        (st = read_id(g, "tokenizer.ggml.padding_token_id", n, false, &tok->pad)) != CLLM_OK ||
        (st = read_bool(g, KEY_ADD_BOS, &tok->add_bos)) != CLLM_OK ||
        (st = read_bool(g, KEY_ADD_EOS, &tok->add_eos)) != CLLM_OK ||
        (st = read_bool(g, KEY_ADD_SPACE_PREFIX, &tok->add_space_prefix)) != CLLM_OK)
        return st;
    if (tok->kind == CLLM_TOKENIZER_BPE) tok->add_space_prefix = false;
    const bool spm = tok->kind == CLLM_TOKENIZER_SPM;
    if (tok->add_bos && tok->bos < 0)
        return no_token_to_add(g, "BOS", KEY_ADD_BOS, KEY_BOS, spm ? 1 : -1, n);
    if (tok->add_eos && tok->eos < 0)
        return no_token_to_add(g, "EOS", KEY_ADD_EOS, KEY_EOS, spm ? 2 : -1, n);

    /* End of generation. */
    for (size_t k = 0; tok->eot < 0 && k < CLLM_ARRAY_SIZE(k_eot_texts); k++)
        tok->eot = find_turn_token(tok, k_eot_texts[k]);
    int32_t eog[] = {tok->eos, tok->eot, tok->eom};
    for (size_t k = 0; k < CLLM_ARRAY_SIZE(eog); k++)
        if (eog[k] >= 0) tok->tokens[eog[k]].flags |= CLLM_TOKF_EOG;
    for (size_t k = 0; k < CLLM_ARRAY_SIZE(k_eog_texts); k++) {
        int32_t id = find_turn_token(tok, k_eog_texts[k]);
        if (id >= 0) tok->tokens[id].flags |= CLLM_TOKF_EOG;
    }
    /* A user-defined token that ends a turn is a control token, as llama.cpp
     * makes it: plain text that spells it (e.g. Phi-3's "</s>") is text. */
    for (int32_t id = 0; id < n; id++) {
        cllm_token_data *t = &tok->tokens[id];
        if ((t->flags & CLLM_TOKF_EOG) && t->type == CLLM_TOKEN_TYPE_USER_DEFINED)
            t->type = CLLM_TOKEN_TYPE_CONTROL;
    }

    phi3_rstrip(tok, g);
    make_pieces(tok);
    return build_trie(tok);
}

cllm_status cllm_tokenizer_new_from_gguf(const cllm_gguf *g, cllm_tokenizer **out) {
    CLLM_ASSERT(g && out);
    cllm_tokenizer *tok = cllm_calloc(1, sizeof(*tok));
    if (!tok) return cllm_error(CLLM_ERR_NOMEM, "%s: out of memory", cllm_gguf_name(g));
    cllm_status st = load(tok, g);
    if (st != CLLM_OK) {
        cllm_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return CLLM_OK;
}

void cllm_tokenizer_free(cllm_tokenizer *tok) {
    if (!tok) return;
    cllm_free(tok->tokens);
    cllm_free(tok->text_pool);
    cllm_free(tok->piece_pool);
    cllm_free(tok->map);
    cllm_free(tok->merge_pool);
    cllm_free(tok->merge_off);
    cllm_free(tok->merge_len);
    cllm_free(tok->merge_left);
    cllm_free(tok->merge_map);
    cllm_free(tok->trie);
    cllm_free(tok);
}

/* ---- encoding ---- */

static cllm_status encode_stretch(const cllm_tokenizer *tok, const char *text, size_t len,
                                  bool after_special, cllm_tok_scratch *s, cllm_tok_out *out) {
    if (tok->kind == CLLM_TOKENIZER_SPM)
        return cllm_tok_spm_encode(tok, text, len, tok->add_space_prefix && after_special, s, out);
    return cllm_tok_bpe_encode(tok, text, len, s, out);
}

cllm_status cllm_tokenizer_encode(const cllm_tokenizer *tok, const char *text, size_t len,
                                  bool add_special, bool parse_special, int32_t *ids,
                                  size_t max_ids, size_t *n_ids) {
    CLLM_ASSERT(tok && n_ids);
    if (!text && len > 0)
        return cllm_error(CLLM_ERR_INVALID_ARG, "tokenizer: encode: text is NULL");
    bool count_only = ids == NULL;
    if (count_only) max_ids = 0;
    if (len > CLLM_TOKENIZER_MAX_TEXT)
        return cllm_error(CLLM_ERR_TOO_LARGE,
                          "tokenizer: a text of %zu bytes is over the limit of %zu bytes", len,
                          (size_t)CLLM_TOKENIZER_MAX_TEXT);

    cllm_tok_out out = {ids, max_ids, 0};
    cllm_tok_scratch s = {0};
    cllm_status st = CLLM_OK;
    if (add_special && tok->add_bos) cllm_tok_out_push(&out, tok->bos);

    /* Split at special tokens; plain stretches go to the model. */
    bool after_special = true;
    size_t start = 0;
    if (tok->trie && (parse_special || tok->n_user_defined > 0)) {
        for (size_t pos = 0; pos < len;) {
            size_t mlen = 0;
            int32_t id = match_special(tok, text, len, pos, parse_special, &mlen);
            if (id < 0) {
                pos++;
                continue;
            }
            if (pos > start) {
                st = encode_stretch(tok, text + start, pos - start, after_special, &s, &out);
                if (st != CLLM_OK) goto done;
            }
            cllm_tok_out_push(&out, id);
            after_special = true;
            pos += mlen;
            if (tok->tokens[id].flags & CLLM_TOKF_RSTRIP) {
                while (pos < len && (text[pos] == ' ' || (text[pos] >= '\t' && text[pos] <= '\r')))
                    pos++;
            }
            start = pos;
        }
    }
    if (start < len) {
        st = encode_stretch(tok, text + start, len - start, after_special, &s, &out);
        if (st != CLLM_OK) goto done;
    }
    if (add_special && tok->add_eos) cllm_tok_out_push(&out, tok->eos);

    *n_ids = out.n;
    if (out.n > max_ids && !count_only)
        st = cllm_error(CLLM_ERR_TOO_LARGE,
                        "tokenizer: the text is %zu tokens, more than the %zu that fit", out.n,
                        max_ids);
done:
    cllm_tok_scratch_free(&s);
    return st;
}

/* ---- pieces and decoding ---- */

const char *cllm_tokenizer_token_to_piece(const cllm_tokenizer *tok, int32_t id, bool special,
                                          size_t *len) {
    CLLM_ASSERT(tok && len);
    if (id < 0 || id >= tok->n_vocab) return NULL;
    const cllm_token_data *t = &tok->tokens[id];
    if (!special && t->type == CLLM_TOKEN_TYPE_CONTROL) {
        *len = 0;
        return "";
    }
    if (!special && t->type == CLLM_TOKEN_TYPE_UNKNOWN) {
        *len = CLLM_UTF8_REPLACEMENT_LEN;
        return CLLM_UTF8_REPLACEMENT;
    }
    *len = t->piece_len;
    return tok->piece_pool + t->piece_off;
}

/* The piece of id as rendered in a sequence: *at_text_start tracks where the
 * SPM space prefix is to be dropped. */
static const char *sequence_piece(const cllm_tokenizer *tok, int32_t id, int flags,
                                  bool *at_text_start, size_t *len) {
    const char *p = cllm_tokenizer_token_to_piece(tok, id, (flags & CLLM_DETOK_SPECIAL) != 0, len);
    if (tok->tokens[id].type == CLLM_TOKEN_TYPE_CONTROL) {
        *at_text_start = true;
        return p;
    }
    if (*at_text_start && *len > 0) {
        *at_text_start = false;
        if ((flags & CLLM_DETOK_STRIP_PREFIX) && tok->add_space_prefix && p[0] == ' ') {
            p++;
            (*len)--;
        }
    }
    return p;
}

cllm_status cllm_tokenizer_decode(const cllm_tokenizer *tok, const int32_t *ids, size_t n_ids,
                                  int flags, char *buf, size_t cap, size_t *len) {
    CLLM_ASSERT(tok && len);
    if (!ids && n_ids > 0)
        return cllm_error(CLLM_ERR_INVALID_ARG, "tokenizer: decode: ids is NULL");
    bool measure_only = buf == NULL;
    if (measure_only) cap = 0;
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= tok->n_vocab)
            return cllm_error(CLLM_ERR_INVALID_ARG,
                              "tokenizer: decode: token id %d (at %zu) is out of range (%d tokens)",
                              ids[i], i, tok->n_vocab);
    size_t n = 0;
    bool at_text_start = true;
    for (size_t i = 0; i < n_ids; i++) {
        size_t pl = 0;
        const char *p = sequence_piece(tok, ids[i], flags, &at_text_start, &pl);
        if (n < cap) memcpy(buf + n, p, CLLM_MIN(pl, cap - n));
        n += pl; /* cannot overflow: n_ids * max piece fits in memory */
    }
    *len = n;
    if (n > cap && !measure_only)
        return cllm_error(CLLM_ERR_TOO_LARGE, "tokenizer: decode: %zu bytes do not fit in %zu", n,
                          cap);
    return CLLM_OK;
}

/* ---- streaming detokenizer ---- */

struct cllm_detokenizer {
    const cllm_tokenizer *tok;
    int flags;
    bool at_text_start;
    cllm_utf8_decoder utf8;
    size_t cap;
    char buf[]; /* cap bytes */
};

cllm_status cllm_detokenizer_new_tok(const cllm_tokenizer *tok, int flags, cllm_detokenizer **out) {
    CLLM_ASSERT(tok && out);
    /* Every byte in (3 held + one piece) gives at most 3 bytes out. */
    size_t cap = 3 * (tok->max_piece_len + 3);
    cllm_detokenizer *d = cllm_malloc(sizeof(*d) + cap);
    if (!d) return cllm_error(CLLM_ERR_NOMEM, "tokenizer: out of memory for a detokenizer");
    d->tok = tok;
    d->flags = flags;
    d->cap = cap;
    cllm_detokenizer_reset(d);
    *out = d;
    return CLLM_OK;
}

void cllm_detokenizer_free(cllm_detokenizer *d) { cllm_free(d); }

void cllm_detokenizer_reset(cllm_detokenizer *d) {
    if (!d) return;
    d->at_text_start = true;
    cllm_utf8_decoder_reset(&d->utf8);
}

cllm_status cllm_detokenizer_put(cllm_detokenizer *d, int32_t id, const char **text, size_t *len) {
    if (!d || !text || !len) return CLLM_NULL_ARG("the detokenizer, text or len");
    if (id < 0 || id >= d->tok->n_vocab)
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "tokenizer: detokenizer: token id %d is out of range (%d tokens)", id,
                          d->tok->n_vocab);
    size_t pl = 0;
    const char *p = sequence_piece(d->tok, id, d->flags, &d->at_text_start, &pl);
    size_t n = 0;
    for (size_t i = 0; i < pl; i++)
        n += cllm_utf8_decoder_put(&d->utf8, (unsigned char)p[i], d->buf + n);
    CLLM_ASSERT(n <= d->cap);
    *text = d->buf;
    *len = n;
    return CLLM_OK;
}

void cllm_detokenizer_flush(cllm_detokenizer *d, const char **text, size_t *len) {
    if (!d) {
        if (text) *text = "";
        if (len) *len = 0;
        return;
    }
    if (!text || !len) return; /* nothing to give the text to */
    *len = cllm_utf8_decoder_flush(&d->utf8, d->buf);
    *text = d->buf;
    d->at_text_start = true;
}

/* ---- vocabulary ---- */

int32_t cllm_tokenizer_n_vocab(const cllm_tokenizer *tok) { return tok->n_vocab; }
cllm_tokenizer_kind cllm_tokenizer_kind_of(const cllm_tokenizer *tok) { return tok->kind; }
cllm_pretok cllm_tokenizer_pretok(const cllm_tokenizer *tok) { return tok->pretok; }
int32_t cllm_tokenizer_bos(const cllm_tokenizer *tok) { return tok->bos; }
int32_t cllm_tokenizer_eos(const cllm_tokenizer *tok) { return tok->eos; }
int32_t cllm_tokenizer_eot(const cllm_tokenizer *tok) { return tok->eot; }
int32_t cllm_tokenizer_unk(const cllm_tokenizer *tok) { return tok->unk; }
int32_t cllm_tokenizer_pad(const cllm_tokenizer *tok) { return tok->pad; }
bool cllm_tokenizer_add_bos(const cllm_tokenizer *tok) { return tok->add_bos; }
bool cllm_tokenizer_add_eos(const cllm_tokenizer *tok) { return tok->add_eos; }

bool cllm_tokenizer_is_eog(const cllm_tokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->n_vocab && (tok->tokens[id].flags & CLLM_TOKF_EOG);
}

cllm_token_type cllm_tokenizer_token_type(const cllm_tokenizer *tok, int32_t id) {
    if (id < 0 || id >= tok->n_vocab) return CLLM_TOKEN_TYPE_COUNT;
    return (cllm_token_type)tok->tokens[id].type;
}

const char *cllm_tokenizer_token_text(const cllm_tokenizer *tok, int32_t id, size_t *len) {
    if (id < 0 || id >= tok->n_vocab) return NULL;
    if (len) *len = tok->tokens[id].text_len;
    return tok_text(tok, id);
}

int32_t cllm_tokenizer_find(const cllm_tokenizer *tok, const char *text, size_t len) {
    if (!text && len > 0) return -1;
    return cllm_tok_lookup(tok, text ? text : "", len);
}
