/*
 * UTF-8 decoding and validation, and look-ups in the generated class tables.
 */
#include "text/unicode.h"

#include <string.h>

/*
 * For a lead byte: the sequence length (0 = cannot start a sequence) and the
 * valid range of the second byte (RFC 3629, table 3-7 of the Unicode
 * standard: excludes overlong forms, surrogates and code points > U+10FFFF).
 */
static int utf8_lead(unsigned char b, unsigned char *lo, unsigned char *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (b < 0x80) return 1;
    if (b < 0xC2) return 0;
    if (b < 0xE0) return 2;
    if (b < 0xF0) {
        if (b == 0xE0) *lo = 0xA0;
        if (b == 0xED) *hi = 0x9F;
        return 3;
    }
    if (b < 0xF5) {
        if (b == 0xF0) *lo = 0x90;
        if (b == 0xF4) *hi = 0x8F;
        return 4;
    }
    return 0;
}

size_t cllm_utf8_decode(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned char lo, hi;
    int len = utf8_lead(u[0], &lo, &hi);
    if (len == 1) {
        *cp = u[0];
        return 1;
    }
    if (len == 0 || (size_t)len > n || u[1] < lo || u[1] > hi) goto invalid;
    for (int k = 2; k < len; k++)
        if (u[k] < 0x80 || u[k] > 0xBF) goto invalid;
    uint32_t c = u[0] & (0x7F >> len);
    for (int k = 1; k < len; k++) c = (c << 6) | (u[k] & 0x3F);
    *cp = c;
    return (size_t)len;
invalid:
    *cp = CLLM_UTF8_INVALID_BASE + u[0];
    return 1;
}

size_t cllm_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp <= 0x10FFFF) {
        out[0] = (char)(0xF0 | (cp >> 18));
        out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[3] = (char)(0x80 | (cp & 0x3F));
        return 4;
    }
    return 0;
}

bool cllm_utf8_valid(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        i += cllm_utf8_decode(s + i, n - i, &cp);
        if (cp >= CLLM_UTF8_INVALID_BASE) return false;
    }
    return true;
}

size_t cllm_utf8_decoder_put(cllm_utf8_decoder *st, unsigned char b, char *out) {
    size_t n_out = 0;
    if (st->n > 0) {
        if (b >= st->lo && b <= st->hi) {
            st->buf[st->n++] = b;
            st->lo = 0x80;
            st->hi = 0xBF;
            if (st->n < st->need) return 0;
            memcpy(out, st->buf, st->n);
            n_out = st->n;
            cllm_utf8_decoder_reset(st);
            return n_out;
        }
        /* The held bytes are a maximal ill-formed subpart: one U+FFFD; then b
         * starts afresh. */
        memcpy(out, CLLM_UTF8_REPLACEMENT, CLLM_UTF8_REPLACEMENT_LEN);
        n_out = CLLM_UTF8_REPLACEMENT_LEN;
        cllm_utf8_decoder_reset(st);
    }
    unsigned char lo, hi;
    int len = utf8_lead(b, &lo, &hi);
    if (len == 1) {
        out[n_out++] = (char)b;
    } else if (len == 0) {
        memcpy(out + n_out, CLLM_UTF8_REPLACEMENT, CLLM_UTF8_REPLACEMENT_LEN);
        n_out += CLLM_UTF8_REPLACEMENT_LEN;
    } else {
        st->buf[0] = b;
        st->n = 1;
        st->need = (uint8_t)len;
        st->lo = lo;
        st->hi = hi;
    }
    return n_out;
}

size_t cllm_utf8_decoder_flush(cllm_utf8_decoder *st, char *out) {
    if (st->n == 0) return 0;
    cllm_utf8_decoder_reset(st);
    memcpy(out, CLLM_UTF8_REPLACEMENT, CLLM_UTF8_REPLACEMENT_LEN);
    return CLLM_UTF8_REPLACEMENT_LEN;
}

static bool in_ranges(const cllm_unicode_range *r, size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid].first) {
            hi = mid;
        } else if (cp > r[mid].last) {
            lo = mid + 1;
        } else {
            return true;
        }
    }
    return false;
}

bool cllm_unicode_is_letter(uint32_t cp) {
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    return in_ranges(cllm_unicode_letter, cllm_unicode_letter_count, cp);
}

bool cllm_unicode_is_number(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    return in_ranges(cllm_unicode_number, cllm_unicode_number_count, cp);
}

bool cllm_unicode_is_space(uint32_t cp) {
    if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
    return in_ranges(cllm_unicode_white_space, cllm_unicode_white_space_count, cp);
}

unsigned cllm_unicode_class(uint32_t cp) {
    if (cllm_unicode_is_letter(cp)) return CLLM_UCLASS_LETTER;
    if (cllm_unicode_is_number(cp)) return CLLM_UCLASS_NUMBER;
    if (cllm_unicode_is_space(cp)) return CLLM_UCLASS_SPACE;
    return 0;
}
