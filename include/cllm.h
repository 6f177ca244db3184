/*
 * cllm — run GGUF language models on every device of a machine, with memory
 * that is planned, not guessed.
 *
 * This is the public API. It is small today and grows with the library:
 * status codes, logging and the memory kinds every byte is accounted to.
 *
 * Usage:
 *
 *     cllm_log_set(my_log, my_user_data);      // optional, default: stderr
 *     cllm_status st = some_cllm_call(...);
 *     if (st != CLLM_OK)
 *         fprintf(stderr, "%s: %s\n", cllm_status_str(st), cllm_last_error());
 *
 * Conventions (all public functions):
 *  - Functions that can fail because of input or the environment return a
 *    cllm_status. On failure, objects are left unchanged, output parameters
 *    are untouched, and a one-line message is logged and kept in
 *    cllm_last_error().
 *  - Who calls `*_new` calls `*_free`; `*_free(NULL)` does nothing.
 *  - Library code never calls exit() and never aborts on input. A broken
 *    invariant (a programmer error) aborts with file:line and a message.
 */
#ifndef CLLM_H
#define CLLM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CLLM_VERSION_MAJOR 0
#define CLLM_VERSION_MINOR 1
#define CLLM_VERSION_PATCH 0

/* Status codes. CLLM_OK is zero; everything else is an error. */
typedef enum cllm_status {
    CLLM_OK = 0,
    CLLM_ERR_NOMEM,         /* a host allocation failed */
    CLLM_ERR_DEVICE_MEMORY, /* a device buffer allocation failed */
    CLLM_ERR_IO,            /* reading or writing a file failed */
    CLLM_ERR_FORMAT,        /* malformed input (file contents, text) */
    CLLM_ERR_UNSUPPORTED,   /* valid input the library cannot handle */
    CLLM_ERR_INVALID_ARG,   /* an argument out of its documented range */
    CLLM_ERR_TOO_LARGE,     /* a size exceeds a budget, limit or buffer */
    CLLM_ERR_BACKEND,       /* a backend failed to compute */
    CLLM_STATUS_COUNT
} cllm_status;

/* A constant, human-readable name for a status ("out of memory", ...). */
const char *cllm_status_str(cllm_status status);

/* Memory kinds: every byte cllm allocates belongs to exactly one. */
typedef enum cllm_mem_kind {
    CLLM_MEM_WEIGHTS = 0, /* model weights: one set per model */
    CLLM_MEM_STATE,       /* KV cache and other per-session state */
    CLLM_MEM_COMPUTE,     /* transient tensors of graphs, planned ahead */
    CLLM_MEM_WORKSPACE,   /* backend scratch, declared by the backend */
    CLLM_MEM_COUNT
} cllm_mem_kind;

/* "weights", "state", "compute" or "workspace". */
const char *cllm_mem_kind_str(cllm_mem_kind kind);

typedef enum cllm_log_level {
    CLLM_LOG_DEBUG = 0,
    CLLM_LOG_INFO,
    CLLM_LOG_WARN,
    CLLM_LOG_ERROR,
    CLLM_LOG_COUNT
} cllm_log_level;

/* Receives every log line (without a trailing newline). */
typedef void (*cllm_log_fn)(cllm_log_level level, const char *msg, void *user_data);

/*
 * Routes log messages to `fn` (NULL restores the default, which prints
 * warnings and errors to stderr, and everything at or above the level set by
 * the environment variable CLLM_LOG=debug|info|warn|error). Not thread-safe
 * with respect to concurrent logging; call it at start-up.
 */
void cllm_log_set(cllm_log_fn fn, void *user_data);

/* Sets the minimum level of the default logger. */
void cllm_log_set_level(cllm_log_level level);

/*
 * The message of the last error logged on the calling thread ("" if none).
 * The string stays valid until the next error on this thread.
 */
const char *cllm_last_error(void);

/* "0.1.0" */
const char *cllm_version(void);

#ifdef __cplusplus
}
#endif

#endif /* CLLM_H */
