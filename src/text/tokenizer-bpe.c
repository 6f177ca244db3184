/*
 * Byte-level BPE ("gpt2" vocabularies).
 *
 * The pre-tokenizer splits the text into pieces (pretok.c). Each piece's
 * bytes are mapped to printable code points (GPT-2's bytes_to_unicode: the
 * printable Latin-1 bytes stand for themselves, the other 68 bytes map in
 * order to U+0100..U+0143), one symbol per byte. Then, among adjacent
 * symbol pairs listed in the merges, the pair with the lowest rank (the
 * leftmost on ties) is merged, repeatedly, with a heap of candidates as in
 * the SPM tokenizer. Each final symbol is its vocab token.
 */
#include "text/tokenizer-impl.h"
#include "text/unicode.h"

#include <string.h>

void cllm_tok_bpe_init_bytes(cllm_tokenizer *tok) {
    for (int c = 0; c < (int)CLLM_ARRAY_SIZE(tok->cp_to_byte); c++) tok->cp_to_byte[c] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        int cp = printable ? b : 256 + extra++;
        tok->byte_to_cp[b] = (uint16_t)cp;
        tok->cp_to_byte[cp] = (int16_t)b;
    }
    CLLM_ASSERT(extra == 68);
}

typedef struct bpe_ctx {
    const cllm_tokenizer *tok;
    const char *text;
    cllm_tok_scratch *s;
    cllm_tok_out *out;
} bpe_ctx;

static bool bpe_try_pair(const cllm_tokenizer *tok, cllm_tok_scratch *s, int32_t left,
                         int32_t right) {
    if (left < 0 || right < 0) return true;
    const cllm_tok_sym *l = &s->syms[left];
    const cllm_tok_sym *r = &s->syms[right];
    int32_t rank = cllm_tok_merge_rank(tok, s->text + l->off, l->len, s->text + r->off, r->len);
    if (rank < 0) return true;
    cllm_tok_bigram b = {(double)rank, left, right, l->len + r->len};
    return cllm_tok_heap_push(s, b);
}

/* Emits a final symbol: its token, else the token of each of its characters,
 * else <unk>. */
static cllm_status bpe_emit(const cllm_tokenizer *tok, const char *p, size_t n, cllm_tok_out *out) {
    int32_t id = cllm_tok_lookup_text(tok, p, n);
    if (id >= 0) {
        cllm_tok_out_push(out, id);
        return CLLM_OK;
    }
    for (size_t k = 0; k < n;) {
        uint32_t cp;
        size_t cl = cllm_utf8_decode(p + k, n - k, &cp);
        id = cllm_tok_lookup_text(tok, p + k, cl);
        if (id < 0) id = tok->unk;
        if (id < 0)
            return cllm_error(CLLM_ERR_UNSUPPORTED,
                              "tokenizer: the text has a byte that the vocabulary cannot "
                              "represent (no byte-level token, no unknown token)");
        cllm_tok_out_push(out, id);
        k += cl;
    }
    return CLLM_OK;
}

static cllm_status bpe_piece(void *user_data, size_t start, size_t end) {
    bpe_ctx *c = user_data;
    const cllm_tokenizer *tok = c->tok;
    cllm_tok_scratch *s = c->s;
    size_t n = end - start;

    /* The mapped text: 1 or 2 bytes of UTF-8 per input byte, one symbol each. */
    if (!cllm_tok_scratch_text(s, 2 * n) || !cllm_tok_scratch_syms(s, n)) goto nomem;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        char u[4];
        size_t ul = cllm_utf8_encode(tok->byte_to_cp[(unsigned char)c->text[start + i]], u);
        memcpy(s->text + w, u, ul);
        s->syms[i] = (cllm_tok_sym){(int32_t)i - 1, (int32_t)i + 1, (uint32_t)w, (uint32_t)ul};
        w += ul;
    }
    s->syms[n - 1].next = -1;

    if (n == 1 || tok->ignore_merges) {
        int32_t id = cllm_tok_lookup_text(tok, s->text, w);
        if (id >= 0) {
            cllm_tok_out_push(c->out, id);
            return CLLM_OK;
        }
    }

    if (!cllm_tok_merge(tok, s, (int32_t)n, bpe_try_pair)) goto nomem;

    for (int32_t i = 0; i >= 0; i = s->syms[i].next) {
        const cllm_tok_sym *y = &s->syms[i];
        cllm_status st = bpe_emit(tok, s->text + y->off, y->len, c->out);
        if (st != CLLM_OK) return st;
    }
    return CLLM_OK;

nomem:
    return cllm_error(CLLM_ERR_NOMEM, "tokenizer: out of memory for a piece of %zu bytes", n);
}

cllm_status cllm_tok_bpe_encode(const cllm_tokenizer *tok, const char *text, size_t len,
                                cllm_tok_scratch *s, cllm_tok_out *out) {
    bpe_ctx c = {tok, text, s, out};
    return cllm_pretok_split(tok->pretok, text, len, bpe_piece, &c);
}
