/* Logging, the last-error message, status names, and the escaping of
 * untrusted text that the default logger applies. */
#include "core/common.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The sink: a callback and its user data, set and read together under
 * g_log_mutex (a reader copies the pair and calls it outside the lock, so
 * that a callback may log). g_log_set tells without the lock whether a
 * callback was ever set, so the default logger takes no lock. */
static pthread_mutex_t g_log_mutex = PTHREAD_MUTEX_INITIALIZER;
static cllm_log_fn g_log_fn;
static void *g_log_user_data;
static atomic_bool g_log_set;
static atomic_int g_log_level = -1; /* -1: not read from the environment yet */

static _Thread_local char g_last_error[512];

static const char *const k_status_names[] = {
    [CLLM_OK] = "ok",
    [CLLM_ERR_NOMEM] = "out of host memory",
    [CLLM_ERR_DEVICE_MEMORY] = "out of device memory",
    [CLLM_ERR_IO] = "I/O error",
    [CLLM_ERR_FORMAT] = "malformed input",
    [CLLM_ERR_UNSUPPORTED] = "unsupported",
    [CLLM_ERR_INVALID_ARG] = "invalid argument",
    [CLLM_ERR_TOO_LARGE] = "too large",
    [CLLM_ERR_BACKEND] = "backend failure",
};
_Static_assert(CLLM_ARRAY_SIZE(k_status_names) == CLLM_STATUS_COUNT, "status names");

static const char *const k_mem_kind_names[] = {
    [CLLM_MEM_WEIGHTS] = "weights",
    [CLLM_MEM_STATE] = "state",
    [CLLM_MEM_COMPUTE] = "compute",
    [CLLM_MEM_WORKSPACE] = "workspace",
};
_Static_assert(CLLM_ARRAY_SIZE(k_mem_kind_names) == CLLM_MEM_COUNT, "memory kind names");

static const char *const k_level_names[] = {
    [CLLM_LOG_DEBUG] = "debug",
    [CLLM_LOG_INFO] = "info",
    [CLLM_LOG_WARN] = "warning",
    [CLLM_LOG_ERROR] = "error",
};
_Static_assert(CLLM_ARRAY_SIZE(k_level_names) == CLLM_LOG_COUNT, "log level names");

const char *cllm_status_str(cllm_status status) {
    if ((unsigned)status >= CLLM_STATUS_COUNT) return "unknown status";
    return k_status_names[status];
}

const char *cllm_mem_kind_str(cllm_mem_kind kind) {
    if ((unsigned)kind >= CLLM_MEM_COUNT) return "unknown";
    return k_mem_kind_names[kind];
}

const char *cllm_version(void) { return "0.1.0"; }

const char *cllm_last_error(void) { return g_last_error; }

void cllm_log_set(cllm_log_fn fn, void *user_data) {
    pthread_mutex_lock(&g_log_mutex);
    g_log_fn = fn;
    g_log_user_data = fn ? user_data : NULL;
    atomic_store(&g_log_set, fn != NULL);
    pthread_mutex_unlock(&g_log_mutex);
}

void cllm_log_set_level(cllm_log_level level) {
    if ((unsigned)level >= CLLM_LOG_COUNT) return; /* out of the enum: ignored */
    atomic_store(&g_log_level, (int)level);
}

/* The level set, else the one CLLM_LOG names (read once: threads that get
 * here together compute the same value, and the first store wins). */
static int default_level(void) {
    const int set = atomic_load(&g_log_level);
    if (set >= 0) return set;
    int level = CLLM_LOG_WARN;
    const char *env = getenv("CLLM_LOG");
    if (env) {
        for (int i = 0; i < CLLM_LOG_COUNT; i++) {
            if (strncasecmp(env, k_level_names[i], 4) == 0) level = i;
        }
    }
    int expected = -1;
    if (!atomic_compare_exchange_strong(&g_log_level, &expected, level)) return expected;
    return level;
}

cllm_log_level cllm_log_get_level(void) { return (cllm_log_level)default_level(); }

static void log_v(cllm_log_level level, const char *fmt, va_list ap) {
    char msg[1024];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (atomic_load(&g_log_set)) {
        pthread_mutex_lock(&g_log_mutex);
        const cllm_log_fn fn = g_log_fn;
        void *const ud = g_log_user_data;
        pthread_mutex_unlock(&g_log_mutex);
        if (fn) {
            fn(level, msg, ud);
            return;
        }
    }
    if ((int)level < default_level()) return;
    /* messages quote strings of files: one line, nothing a terminal acts on */
    char esc[4 * sizeof(msg)]; /* an escape is at most 4 bytes per input byte */
    cllm_escape(esc, sizeof(esc), msg, strlen(msg), CLLM_ESCAPE_TEXT);
    fprintf(stderr, "cllm %s: %s\n", k_level_names[level], esc);
}

void cllm_log(cllm_log_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_v(level, fmt, ap);
    va_end(ap);
}

cllm_status cllm_error(cllm_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_last_error, sizeof(g_last_error), fmt, ap);
    va_end(ap);
    cllm_log(CLLM_LOG_ERROR, "%s", g_last_error);
    return status;
}

/* ---- escaping --------------------------------------------------------- */

/* The length of the well-formed UTF-8 sequence that starts s[0..n) (1 to 4)
 * with its code point in *cp, or 0 if none starts there: a stray
 * continuation byte, an overlong form, a surrogate, a code point past
 * U+10FFFF, a sequence cut short. */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp) {
    const unsigned c = s[0];
    size_t k;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if (c >= 0xc2 && c <= 0xdf) {
        k = 2, v = c & 0x1f, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        k = 3, v = c & 0x0f, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        k = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < k) return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3fu);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return k;
}

/* Code points a terminal may act on: C1 controls, line and paragraph
 * separators, bidirectional embeddings, overrides and isolates. */
static bool is_format_control(uint32_t cp) {
    return (cp >= 0x80 && cp <= 0x9f) || (cp >= 0x2028 && cp <= 0x202e) ||
           (cp >= 0x2066 && cp <= 0x2069);
}

/* The escaped form of the character or byte at s[0..n) into out (at most 6
 * bytes, not NUL-terminated); returns its length, and in *used how many
 * bytes of s it stands for. */
static size_t escape_one(const unsigned char *s, size_t n, cllm_escape_mode mode, char out[8],
                         size_t *used) {
    const bool json = mode == CLLM_ESCAPE_JSON;
    uint32_t cp = 0;
    const size_t k = utf8_seq(s, n, &cp);
    *used = k ? k : 1;
    const char *fixed = NULL;
    if (k == 0) {
        if (!json) return (size_t)snprintf(out, 8, "\\x%02x", s[0]);
        fixed = "\\ufffd";
    } else if (cp == '\\') {
        fixed = "\\\\";
    } else if (cp == '\n') {
        fixed = "\\n";
    } else if (cp == '\r') {
        fixed = "\\r";
    } else if (cp == '\t') {
        fixed = "\\t";
    } else if (json && cp == '"') {
        fixed = "\\\"";
    } else if (json && cp == '\b') {
        fixed = "\\b";
    } else if (json && cp == '\f') {
        fixed = "\\f";
    } else if (cp < 0x20 || cp == 0x7f) {
        return (size_t)snprintf(out, 8, json ? "\\u%04x" : "\\x%02x", (unsigned)cp);
    } else if (is_format_control(cp)) {
        return (size_t)snprintf(out, 8, "\\u%04x", (unsigned)cp);
    } else {
        memcpy(out, s, k);
        return k;
    }
    const size_t m = strlen(fixed);
    memcpy(out, fixed, m);
    return m;
}

size_t cllm_escape(char *buf, size_t size, const char *s, size_t len, cllm_escape_mode mode) {
    if (!s) len = 0; /* nothing to escape */
    if (!buf) size = 0;
    const unsigned char *u = (const unsigned char *)s;
    size_t total = 0, used;
    bool cut = false;
    for (size_t i = 0; i < len; i += used) {
        char piece[8];
        const size_t m = escape_one(u + i, len - i, mode, piece, &used);
        if (!cut && total + m < size) {
            memcpy(buf + total, piece, m);
        } else if (!cut) {
            cut = true;
            if (size > 0) buf[total] = '\0'; /* what fitted, no piece cut in two */
        }
        total += m;
    }
    if (!cut && size > 0) buf[total] = '\0';
    return total;
}

void cllm_escape_fputs(FILE *f, const char *s, size_t len, cllm_escape_mode mode) {
    if (!f || !s) return;
    const unsigned char *u = (const unsigned char *)s;
    size_t used;
    for (size_t i = 0; i < len; i += used) {
        char piece[8];
        const size_t m = escape_one(u + i, len - i, mode, piece, &used);
        fwrite(piece, 1, m, f);
    }
}

void cllm_abort(const char *file, int line, const char *fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "%s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}
