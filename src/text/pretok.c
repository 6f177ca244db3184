/*
 * Pre-tokenizers of byte-level BPE: hand-written matchers equivalent to the
 * regular expressions below (leftmost alternative first, greedy quantifiers
 * with backtracking), over code points decoded from UTF-8. An undecodable
 * byte is one code point of class "other" (neither \p{L}, \p{N} nor \s).
 *
 * GPT-2:
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * Llama 3:
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
 *   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Qwen2: Llama 3's with \p{N} instead of \p{N}{1,3} (every digit alone).
 * SmolLM: every \p{N} code point alone, then GPT-2 on the stretches between.
 *
 * A match is always tried at the end of the previous one, and every position
 * matches one of the alternatives, so the pieces cover the text. Each matcher
 * sees only text[0..end): the end of a stretch is the end of text for the
 * look-ahead, as in a sequence of Hugging Face pre-tokenizers.
 */
#include "text/tokenizer-impl.h"
#include "text/unicode.h"

/* Character classes of a matcher; OTHER is [^\s\p{L}\p{N}]. */
enum { CL_END = 0, CL_LETTER, CL_NUMBER, CL_SPACE, CL_OTHER };

typedef struct pt_char {
    uint32_t cp;
    int cls;
    size_t len; /* bytes; 0 at the end */
} pt_char;

static pt_char pt_at(const char *s, size_t end, size_t i) {
    pt_char c = {0, CL_END, 0};
    if (i >= end) return c;
    unsigned char b = (unsigned char)s[i];
    if (b < 0x80) {
        /* ASCII fast path. */
        c.cp = b;
        c.len = 1;
        if ((b | 0x20) >= 'a' && (b | 0x20) <= 'z') {
            c.cls = CL_LETTER;
        } else if (b >= '0' && b <= '9') {
            c.cls = CL_NUMBER;
        } else if (b == ' ' || (b >= 0x09 && b <= 0x0D)) {
            c.cls = CL_SPACE;
        } else {
            c.cls = CL_OTHER;
        }
        return c;
    }
    c.len = cllm_utf8_decode(s + i, end - i, &c.cp);
    unsigned u = cllm_unicode_class(c.cp);
    c.cls = (u & CLLM_UCLASS_LETTER)   ? CL_LETTER
            : (u & CLLM_UCLASS_NUMBER) ? CL_NUMBER
            : (u & CLLM_UCLASS_SPACE)  ? CL_SPACE
                                       : CL_OTHER;
    return c;
}

/* End of the run of class `cls` starting at i. */
static size_t pt_run(const char *s, size_t end, size_t i, int cls) {
    for (;;) {
        pt_char c = pt_at(s, end, i);
        if (c.cls != cls) return i;
        i += c.len;
    }
}

/* \s+(?!\S)|\s+ at i, where text[i] is whitespace. */
static size_t pt_space_tail(const char *s, size_t end, size_t i) {
    size_t j = i, last = i;
    for (;;) {
        pt_char c = pt_at(s, end, j);
        if (c.cls != CL_SPACE) break;
        last = j;
        j += c.len;
    }
    /* At the end of text the look-ahead holds for the whole run; otherwise
     * the run gives back its last character, unless that leaves nothing,
     * in which case \s+ takes the whole (one-character) run. */
    if (j >= end || last == i) return j;
    return last;
}

/* 's|'t|'re|'ve|'m|'ll|'d at i (text[i] == '\''); 0 if none. `fold` makes it
 * case-insensitive: | 0x20 maps 'A'..'Z' onto 'a'..'z' (and other bytes onto
 * bytes that are not lower-case letters, which never match). */
static size_t pt_contraction(const char *s, size_t end, size_t i, bool fold) {
    if (i + 1 >= end) return 0;
    unsigned char a = (unsigned char)s[i + 1];
    if (fold && a < 0x80) a = (unsigned char)(a | 0x20);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 >= end) return 0;
    unsigned char b = (unsigned char)s[i + 2];
    if (fold && b < 0x80) b = (unsigned char)(b | 0x20);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return 0;
}

static size_t pt_gpt2(const char *s, size_t end, size_t i) {
    pt_char c0 = pt_at(s, end, i);
    if (c0.cp == '\'') {
        size_t e = pt_contraction(s, end, i, false);
        if (e) return e;
    }
    /* " ?X+" for X in L, N, OTHER: a space may lead a run of a non-space class. */
    if (c0.cp == ' ') {
        pt_char c1 = pt_at(s, end, i + 1);
        if (c1.cls == CL_LETTER || c1.cls == CL_NUMBER || c1.cls == CL_OTHER)
            return pt_run(s, end, i + 1, c1.cls);
    }
    if (c0.cls != CL_SPACE) return pt_run(s, end, i, c0.cls);
    return pt_space_tail(s, end, i);
}

/* Llama 3's pattern, whose numbers are runs of up to max_digits. */
static size_t pt_llama3(const char *s, size_t end, size_t i, int max_digits) {
    pt_char c0 = pt_at(s, end, i);
    if (c0.cp == '\'') {
        size_t e = pt_contraction(s, end, i, true);
        if (e) return e;
    }
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (c0.cls == CL_LETTER) return pt_run(s, end, i, CL_LETTER);
    if (c0.cp != '\r' && c0.cp != '\n' && c0.cls != CL_NUMBER) {
        pt_char c1 = pt_at(s, end, i + c0.len);
        if (c1.cls == CL_LETTER) return pt_run(s, end, i + c0.len, CL_LETTER);
    }
    /* \p{N}{1,3} (qwen2: \p{N}) */
    if (c0.cls == CL_NUMBER) {
        size_t j = i + c0.len;
        for (int k = 1; k < max_digits; k++) {
            pt_char c = pt_at(s, end, j);
            if (c.cls != CL_NUMBER) break;
            j += c.len;
        }
        return j;
    }
    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
    if (c0.cls == CL_OTHER || (c0.cp == ' ' && pt_at(s, end, i + 1).cls == CL_OTHER)) {
        size_t j = pt_run(s, end, c0.cls == CL_OTHER ? i : i + 1, CL_OTHER);
        while (j < end && (s[j] == '\r' || s[j] == '\n')) j++;
        return j;
    }
    /* Here text[i] is whitespace. \s*[\r\n]+ : up to the last \r or \n of
     * the whitespace run. */
    size_t j = i, nl_end = 0;
    for (;;) {
        pt_char c = pt_at(s, end, j);
        if (c.cls != CL_SPACE) break;
        j += c.len;
        if (c.cp == '\r' || c.cp == '\n') nl_end = j;
    }
    if (nl_end) return nl_end;
    return pt_space_tail(s, end, i);
}

cllm_status cllm_pretok_split(cllm_pretok kind, const char *text, size_t len, cllm_pretok_fn fn,
                              void *user_data) {
    CLLM_ASSERT(kind > CLLM_PRETOK_NONE && kind < CLLM_PRETOK_COUNT);
    size_t i = 0;
    while (i < len) {
        size_t stretch_end = len;
        if (kind == CLLM_PRETOK_SMOLLM) {
            /* Digits(individual_digits): a \p{N} code point is a piece alone;
             * GPT-2 then runs on the stretch up to the next one. */
            pt_char c = pt_at(text, len, i);
            if (c.cls == CL_NUMBER) {
                cllm_status st = fn(user_data, i, i + c.len);
                if (st != CLLM_OK) return st;
                i += c.len;
                continue;
            }
            stretch_end = i;
            while (stretch_end < len) {
                pt_char d = pt_at(text, len, stretch_end);
                if (d.cls == CL_NUMBER) break;
                stretch_end += d.len;
            }
        }
        while (i < stretch_end) {
            size_t e = kind == CLLM_PRETOK_LLAMA3  ? pt_llama3(text, stretch_end, i, 3)
                       : kind == CLLM_PRETOK_QWEN2 ? pt_llama3(text, stretch_end, i, 1)
                                                   : pt_gpt2(text, stretch_end, i);
            CLLM_ASSERT(e > i && e <= stretch_end);
            cllm_status st = fn(user_data, i, e);
            if (st != CLLM_OK) return st;
            i = e;
        }
    }
    return CLLM_OK;
}
