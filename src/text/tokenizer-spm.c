/*
 * SentencePiece-style tokenization ("llama" vocabularies).
 *
 * The text (with the space prefix) has its spaces replaced by U+2581 and is
 * split into characters. Then, as SentencePiece's BPE model does: among all
 * adjacent pairs of symbols whose concatenation is a vocab token, merge the
 * one whose token has the highest score (the leftmost on ties), and repeat
 * until no pair forms a token. Candidate pairs sit in a heap; entries made
 * stale by an earlier merge are skipped when popped, so the whole is
 * O(n log n). Symbols left that are not tokens (single characters) become
 * their UTF-8 bytes as <0xXX> tokens, or the unknown token.
 *
 * Every symbol is a vocab token or a single character, so when no token has
 * a U+2581 right after another character (tok->spm_split_words; true of
 * SentencePiece vocabularies, whose pieces have whitespace only in front), no
 * symbol and no candidate pair ever spans a point where U+2581 follows
 * another character. The text is then merged one such word at a time, with
 * the same result and heaps the size of a word instead of the text.
 */
#include "text/tokenizer-impl.h"
#include "text/unicode.h"

#include <string.h>

#define SPM_SPACE     "\xE2\x96\x81" /* U+2581 LOWER ONE EIGHTH BLOCK */
#define SPM_SPACE_LEN 3

static bool spm_try_pair(const cllm_tokenizer *tok, cllm_tok_scratch *s, int32_t left,
                         int32_t right) {
    if (left < 0 || right < 0) return true;
    const cllm_tok_sym *l = &s->syms[left];
    size_t len = (size_t)l->len + s->syms[right].len;
    int32_t id = cllm_tok_lookup_text(tok, s->text + l->off, len);
    if (id < 0) return true;
    cllm_tok_bigram b = {-(double)tok->tokens[id].score, left, right, (uint32_t)len};
    return cllm_tok_heap_push(s, b);
}

/* Emits one final symbol: its token, else its bytes, else <unk>. */
static cllm_status spm_emit(const cllm_tokenizer *tok, const char *p, size_t n, cllm_tok_out *out) {
    int32_t id = cllm_tok_lookup_text(tok, p, n);
    if (id >= 0) {
        cllm_tok_out_push(out, id);
        return CLLM_OK;
    }
    bool bytes_ok = true;
    for (size_t k = 0; k < n; k++) bytes_ok = bytes_ok && tok->byte_token[(unsigned char)p[k]] >= 0;
    if (bytes_ok) {
        for (size_t k = 0; k < n; k++) cllm_tok_out_push(out, tok->byte_token[(unsigned char)p[k]]);
        return CLLM_OK;
    }
    if (tok->unk < 0)
        return cllm_error(CLLM_ERR_UNSUPPORTED,
                          "tokenizer: the text has a character that the vocabulary cannot "
                          "represent (no byte tokens, no unknown token)");
    cllm_tok_out_push(out, tok->unk);
    return CLLM_OK;
}

static bool is_space(const char *t, size_t n, size_t p) {
    return p + SPM_SPACE_LEN <= n && memcmp(t + p, SPM_SPACE, SPM_SPACE_LEN) == 0;
}

/* Tokenizes s->text[begin..end) on its own. */
static cllm_status spm_segment(const cllm_tokenizer *tok, cllm_tok_scratch *s, size_t begin,
                               size_t end, cllm_tok_out *out) {
    /* One symbol per character (an undecodable byte is a character). */
    if (!cllm_tok_scratch_syms(s, end - begin)) goto nomem;
    int32_t n_sym = 0;
    for (size_t i = begin; i < end;) {
        uint32_t cp;
        size_t cl = cllm_utf8_decode(s->text + i, end - i, &cp);
        s->syms[n_sym] = (cllm_tok_sym){n_sym - 1, n_sym + 1, (uint32_t)i, (uint32_t)cl};
        n_sym++;
        i += cl;
    }
    s->syms[n_sym - 1].next = -1;

    if (!cllm_tok_merge(tok, s, n_sym, spm_try_pair)) goto nomem;

    for (int32_t i = 0; i >= 0; i = s->syms[i].next) {
        const cllm_tok_sym *y = &s->syms[i];
        cllm_status st = spm_emit(tok, s->text + y->off, y->len, out);
        if (st != CLLM_OK) return st;
    }
    return CLLM_OK;

nomem:
    return cllm_error(CLLM_ERR_NOMEM, "tokenizer: out of memory for a text of %zu bytes",
                      end - begin);
}

cllm_status cllm_tok_spm_encode(const cllm_tokenizer *tok, const char *text, size_t len,
                                bool prefix, cllm_tok_scratch *s, cllm_tok_out *out) {
    /* Escape: (prefix) + text with ' ' -> U+2581. At most 3 bytes per byte;
     * len <= CLLM_TOKENIZER_MAX_TEXT keeps this far from overflow and below
     * 2^32 for the 32-bit offsets of the symbols. */
    CLLM_ASSERT(len <= CLLM_TOKENIZER_MAX_TEXT);
    size_t cap = SPM_SPACE_LEN * (len + 1);
    if (!cllm_tok_scratch_text(s, cap)) goto nomem;
    size_t n = 0;
    if (prefix) {
        memcpy(s->text, SPM_SPACE, SPM_SPACE_LEN);
        n = SPM_SPACE_LEN;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s->text + n, SPM_SPACE, SPM_SPACE_LEN);
            n += SPM_SPACE_LEN;
        } else {
            s->text[n++] = text[i];
        }
    }
    /* Merge word by word when no merge can cross a word start (see
     * spm_split_words): the same result, with small heaps. */
    size_t seg = 0;
    for (size_t p = 1; p <= n; p++) {
        if (p < n && !(tok->spm_split_words && is_space(s->text, n, p) &&
                       !(p >= SPM_SPACE_LEN && is_space(s->text, n, p - SPM_SPACE_LEN))))
            continue;
        cllm_status st = spm_segment(tok, s, seg, p, out);
        if (st != CLLM_OK) return st;
        seg = p;
    }
    return CLLM_OK;

nomem:
    return cllm_error(CLLM_ERR_NOMEM, "tokenizer: out of memory for a text of %zu bytes", len);
}
