/*
 * Escaping of untrusted text (cllm_escape, cllm_escape_fputs) and the default
 * logger that applies it: a table of single characters and bytes in both
 * modes, cutting to a buffer, and random byte strings whose TEXT escape
 * decodes back to the input and whose escapes in both modes hold no control
 * byte and only valid UTF-8. The default logger prints a message that quotes
 * a hostile string as one escaped line; cllm_last_error keeps the bytes.
 */
#include "common/check.h"
#include "core/common.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct esc_case {
    const char *in;
    size_t len; /* 0: strlen(in) */
    const char *text, *json;
} esc_case;

static const esc_case k_cases[] = {
    {"plain ascii", 0, "plain ascii", "plain ascii"},
    {"a\\b", 0, "a\\\\b", "a\\\\b"},
    {"q\"q", 0, "q\"q", "q\\\"q"},
    {"\n\r\t", 0, "\\n\\r\\t", "\\n\\r\\t"},
    {"\x1b[2J", 0, "\\x1b[2J", "\\u001b[2J"},
    {"\b\f\x7f", 0, "\\x08\\x0c\\x7f", "\\b\\f\\u007f"},
    {"n\0ul", 4, "n\\x00ul", "n\\u0000ul"},
    {"\xc3\xa9t\xc3\xa9", 0, "\xc3\xa9t\xc3\xa9", "\xc3\xa9t\xc3\xa9"}, /* e-acute t e-acute */
    {"\xe2\x82\xac \xf0\x9f\x98\x80", 0, "\xe2\x82\xac \xf0\x9f\x98\x80",
     NULL},                                            /* euro sign, an emoji */
    {"\xc2\x9b[31m", 0, "\\u009b[31m", "\\u009b[31m"}, /* C1 CSI */
    {"\xe2\x80\xae", 0, "\\u202e", "\\u202e"},         /* RLO */
    {"\xe2\x80\xa8", 0, "\\u2028", "\\u2028"},         /* LSEP */
    {"\xe2\x81\xa6", 0, "\\u2066", "\\u2066"},         /* LRI */
    {"\xff\xfe", 0, "\\xff\\xfe", "\\ufffd\\ufffd"},
    {"\x80", 0, "\\x80", "\\ufffd"},                       /* stray continuation */
    {"\xc0\xaf", 0, "\\xc0\\xaf", "\\ufffd\\ufffd"},       /* overlong '/' */
    {"\xe0\x80\xaf", 0, "\\xe0\\x80\\xaf", NULL},          /* overlong, 3 bytes */
    {"\xed\xa0\x80", 0, "\\xed\\xa0\\x80", NULL},          /* surrogate D800 */
    {"\xf4\x90\x80\x80", 0, "\\xf4\\x90\\x80\\x80", NULL}, /* past U+10FFFF */
    {"\xe2\x82", 0, "\\xe2\\x82", "\\ufffd\\ufffd"},       /* cut short */
    {"\xe2\x82x", 0, "\\xe2\\x82x", NULL},                 /* cut short by ASCII */
    {"\xc3\xa9\xc3", 0, "\xc3\xa9\\xc3", NULL},            /* the last one cut */
};

static void check_case(const esc_case *c, cllm_escape_mode mode, const char *want) {
    if (!want) return;
    const size_t len = c->len ? c->len : strlen(c->in);
    char buf[128];
    const size_t n = cllm_escape(buf, sizeof(buf), c->in, len, mode);
    CHECKF(n == strlen(want) && strcmp(buf, want) == 0, "mode %d: '%s' (%zu), want '%s'", (int)mode,
           buf, n, want);
    CHECK(cllm_escape(NULL, 0, c->in, len, mode) == n); /* measuring */
    /* the stream version writes the same bytes */
    char *mem = NULL;
    size_t mem_len = 0;
    FILE *f = open_memstream(&mem, &mem_len);
    CHECK(f != NULL);
    if (!f) return;
    cllm_escape_fputs(f, c->in, len, mode);
    fclose(f);
    CHECKF(mem_len == n && memcmp(mem, want, n) == 0, "fputs, mode %d: '%s'", (int)mode, mem);
    free(mem);
}

/* Cutting: whatever the size, the longest escape of a whole prefix of the
 * input (one that does not end inside e-acute) that fits, NUL-terminated. */
static void check_cuts(void) {
    static const char in[] = "ab\x1b\xc3\xa9\xff\"z"; /* e-acute is bytes 3..4 */
    const size_t len = sizeof(in) - 1;
    for (int mode = 0; mode < CLLM_ESCAPE_COUNT; mode++) {
        const cllm_escape_mode m = (cllm_escape_mode)mode;
        size_t ends[sizeof(in)]; /* escaped length of each whole prefix */
        for (size_t j = 0; j <= len; j++) ends[j] = j == 4 ? 0 : cllm_escape(NULL, 0, in, j, m);
        const size_t n = ends[len];
        for (size_t size = 1; size <= n + 1; size++) {
            char buf[64];
            memset(buf, 'X', sizeof(buf));
            CHECK(cllm_escape(buf, size, in, len, m) == n);
            size_t want = 0;
            for (size_t j = 0; j <= len; j++) {
                if (ends[j] < size && ends[j] > want) want = ends[j];
            }
            char whole[64];
            cllm_escape(whole, sizeof(whole), in, len, m);
            CHECKF(strlen(buf) == want && memcmp(buf, whole, want) == 0,
                   "mode %d size %zu: '%s', want %zu bytes of '%s'", mode, size, buf, want, whole);
        }
    }
    char one = 'X';
    CHECK(cllm_escape(&one, 1, "abc", 3, CLLM_ESCAPE_TEXT) == 3 && one == '\0');
}

/* True if s[0..n) is well-formed UTF-8 without control bytes (the check
 * cllm_escape's output must pass, written independently of it). */
static bool clean_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        const unsigned c = s[i];
        if (c < 0x20 || c == 0x7f) return false;
        size_t k = c < 0x80 ? 1 : c >= 0xc2 && c < 0xe0 ? 2 : c >= 0xe0 && c < 0xf0 ? 3 : 4;
        if (c >= 0xf5 || (c >= 0x80 && c < 0xc2) || i + k > n) return false;
        uint32_t v = k == 1 ? c : k == 2 ? (c & 0x1f) : k == 3 ? (c & 0x0f) : (c & 0x07);
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return false;
            v = v << 6 | (s[i + j] & 0x3f);
        }
        if ((k == 3 && v < 0x800) || (k == 4 && (v < 0x10000 || v > 0x10ffff))) return false;
        if (v >= 0xd800 && v <= 0xdfff) return false;
        if (v >= 0x80 && v <= 0x9f) return false; /* C1 controls */
        i += k;
    }
    return true;
}

/* Decodes a TEXT escape back into bytes: \\ \n \r \t \xNN \uXXXX. */
static size_t unescape_text(const char *s, unsigned char *out) {
    size_t n = 0;
    while (*s) {
        if (*s != '\\') {
            out[n++] = (unsigned char)*s++;
            continue;
        }
        s++;
        const char c = *s++;
        if (c == '\\' || c == 'n' || c == 'r' || c == 't') {
            out[n++] = c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : '\\';
        } else if (c == 'x' || c == 'u') {
            const int digits = c == 'x' ? 2 : 4;
            char hex[5] = {0};
            memcpy(hex, s, (size_t)digits);
            s += digits;
            const unsigned v = (unsigned)strtoul(hex, NULL, 16);
            if (c == 'x') {
                out[n++] = (unsigned char)v;
            } else if (v < 0x800) { /* two bytes: C1 */
                out[n++] = (unsigned char)(0xc0 | v >> 6);
                out[n++] = (unsigned char)(0x80 | (v & 0x3f));
            } else {
                out[n++] = (unsigned char)(0xe0 | v >> 12);
                out[n++] = (unsigned char)(0x80 | ((v >> 6) & 0x3f));
                out[n++] = (unsigned char)(0x80 | (v & 0x3f));
            }
        } else {
            return (size_t)-1;
        }
    }
    return n;
}

static void check_random(void) {
    uint64_t rng = 0x9e3779b97f4a7c15ULL;
    /* bytes drawn from a set rich in control bytes and UTF-8 pieces */
    static const unsigned char k_bytes[] = {'a',  'Z',  ' ',  '\\', '"',  '\n', '\r', '\t', 0x00,
                                            0x1b, 0x07, 0x7f, 0x80, 0x9b, 0xbf, 0xc0, 0xc2, 0xc3,
                                            0xa9, 0xe2, 0x80, 0xae, 0xed, 0xa0, 0xf0, 0x9f, 0x98,
                                            0xf4, 0x90, 0xff, 0xfe, 0x81, 0xa8, 0x8f};
    for (int iter = 0; iter < 20000; iter++) {
        unsigned char in[24];
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        const size_t len = rng % sizeof(in);
        for (size_t i = 0; i < len; i++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            in[i] = k_bytes[rng % sizeof(k_bytes)];
        }
        char text[24 * 6 + 1], json[24 * 6 + 1];
        const size_t nt = cllm_escape(text, sizeof(text), (const char *)in, len, CLLM_ESCAPE_TEXT);
        const size_t nj = cllm_escape(json, sizeof(json), (const char *)in, len, CLLM_ESCAPE_JSON);
        CHECK(nt < sizeof(text) && nj < sizeof(json));
        CHECKF(clean_utf8((const unsigned char *)text, nt), "text escape '%s'", text);
        CHECKF(clean_utf8((const unsigned char *)json, nj), "json escape '%s'", json);
        unsigned char back[24 * 6];
        const size_t nb = unescape_text(text, back);
        CHECKF(nb == len && memcmp(back, in, len) == 0, "'%s' does not decode to the input", text);
        /* in JSON, a quote is always escaped */
        for (size_t i = 0; i < nj; i++) {
            if (json[i] == '"') CHECK(i > 0 && json[i - 1] == '\\');
        }
        if (g_checks_failed > 20) break;
    }
}

/* The default logger: one line on stderr, escaped; the last error keeps the
 * message as it was. */
static void check_default_logger(void) {
    char path[] = "/tmp/cllm-test-log-XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    fflush(stderr);
    const int saved = dup(2);
    dup2(fd, 2);
    cllm_log_set(NULL, NULL);
    cllm_log_set_level(CLLM_LOG_WARN);
    CHECK(cllm_log_get_level() == CLLM_LOG_WARN);
    const char *hostile = "ll\x1b[2J\nllama error: forged\xff";
    cllm_error(CLLM_ERR_UNSUPPORTED, "m.gguf: unknown architecture '%s'", hostile);
    cllm_log(CLLM_LOG_WARN, "key '%s' ignored", hostile);
    cllm_log(CLLM_LOG_INFO, "not printed below the level");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);

    char out[1024] = {0};
    const ssize_t n = pread(fd, out, sizeof(out) - 1, 0);
    close(fd);
    remove(path);
    CHECK(n > 0);
    const char *want = "cllm error: m.gguf: unknown architecture 'll\\x1b[2J\\nllama error: "
                       "forged\\xff'\n"
                       "cllm warning: key 'll\\x1b[2J\\nllama error: forged\\xff' ignored\n";
    CHECKF(strcmp(out, want) == 0, "default logger wrote '%s'", out);
    CHECK(strstr(cllm_last_error(), hostile) != NULL);
    cllm_log_set_level(CLLM_LOG_DEBUG);
    CHECK(cllm_log_get_level() == CLLM_LOG_DEBUG);
}

int main(void) {
    for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); i++) {
        check_case(&k_cases[i], CLLM_ESCAPE_TEXT, k_cases[i].text);
        check_case(&k_cases[i], CLLM_ESCAPE_JSON, k_cases[i].json);
    }
    check_cuts();
    check_random();
    check_default_logger();
    return check_summary("test_log");
}
