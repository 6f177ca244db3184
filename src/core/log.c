/* Logging, the last-error message, status names. */
#include "core/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static cllm_log_fn g_log_fn;
static void *g_log_user_data;
static int g_log_level = -1; /* -1: not read from the environment yet */

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
    g_log_fn = fn;
    g_log_user_data = user_data;
}

void cllm_log_set_level(cllm_log_level level) { g_log_level = (int)level; }

static int default_level(void) {
    if (g_log_level >= 0) return g_log_level;
    int level = CLLM_LOG_WARN;
    const char *env = getenv("CLLM_LOG");
    if (env) {
        for (int i = 0; i < CLLM_LOG_COUNT; i++) {
            if (strncasecmp(env, k_level_names[i], 4) == 0) level = i;
        }
    }
    g_log_level = level;
    return level;
}

static void log_v(cllm_log_level level, const char *fmt, va_list ap) {
    char msg[1024];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (g_log_fn) {
        g_log_fn(level, msg, g_log_user_data);
        return;
    }
    if ((int)level < default_level()) return;
    fprintf(stderr, "cllm %s: %s\n", k_level_names[level], msg);
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
