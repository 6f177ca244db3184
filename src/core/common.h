/*
 * Internal helpers shared by every layer: always-on asserts, logging, and
 * overflow-checked size arithmetic.
 */
#ifndef CLLM_CORE_COMMON_H
#define CLLM_CORE_COMMON_H

#include "cllm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define CLLM_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#define CLLM_NORETURN                 __attribute__((noreturn))
#else
#define CLLM_PRINTF(fmt_idx, arg_idx)
#define CLLM_NORETURN
#endif

/* Prints "file:line: message" to stderr and aborts. For broken invariants only. */
CLLM_NORETURN void cllm_abort(const char *file, int line, const char *fmt, ...) CLLM_PRINTF(3, 4);

/* Always on, also in release builds. */
#define CLLM_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) cllm_abort(__FILE__, __LINE__, "assertion failed: %s", #cond);                \
    } while (0)

/* Always on; the message names what went wrong (op, shapes, ...). */
#define CLLM_ASSERTF(cond, ...)                                                                    \
    do {                                                                                           \
        if (!(cond)) cllm_abort(__FILE__, __LINE__, __VA_ARGS__);                                  \
    } while (0)

#define CLLM_UNUSED(x)     (void)(x)
#define CLLM_MIN(a, b)     ((a) < (b) ? (a) : (b))
#define CLLM_MAX(a, b)     ((a) > (b) ? (a) : (b))
#define CLLM_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Logs one line at `level` through the log callback. */
void cllm_log(cllm_log_level level, const char *fmt, ...) CLLM_PRINTF(2, 3);

/*
 * Logs an error, keeps it as this thread's cllm_last_error(), and returns
 * `status`, so that failure paths read `return cllm_error(CLLM_ERR_IO, ...)`.
 */
cllm_status cllm_error(cllm_status status, const char *fmt, ...) CLLM_PRINTF(2, 3);

/* The refusal of a NULL handle or required pointer by a public function
 * (cllm.h, Conventions): `return CLLM_NULL_ARG("out");` */
#define CLLM_NULL_ARG(what) cllm_error(CLLM_ERR_INVALID_ARG, "%s: %s is NULL", __func__, what)

/*
 * Parses a byte size: "4096" (bytes), "64MiB", "1.5G", with an optional
 * B/K/M/G/T suffix, KB.. or KiB.. (all powers of 1024, case-insensitive),
 * rounded down to whole bytes. Returns false, leaving *out untouched, if `s`
 * is NULL, empty, negative, malformed or larger than SIZE_MAX. Thread-safe.
 * Used by the CLI's --mem, the fit planner and the test device's options.
 */
bool cllm_parse_size(const char *s, size_t *out);

/* Returns the status of `expr` from the calling function if it is not CLLM_OK. */
#define CLLM_TRY(expr)                                                                             \
    do {                                                                                           \
        const cllm_status try_status_ = (expr);                                                    \
        if (try_status_ != CLLM_OK) return try_status_;                                            \
    } while (0)

#define CLLM_LOG_DEBUG(...) cllm_log(CLLM_LOG_DEBUG, __VA_ARGS__)
#define CLLM_LOG_INFO(...)  cllm_log(CLLM_LOG_INFO, __VA_ARGS__)
#define CLLM_LOG_WARN(...)  cllm_log(CLLM_LOG_WARN, __VA_ARGS__)

/* a * b into *out; returns true on overflow (and leaves *out untouched). */
static inline bool cllm_mul_overflow(size_t a, size_t b, size_t *out) {
    size_t r;
    if (__builtin_mul_overflow(a, b, &r)) return true;
    *out = r;
    return false;
}

/* a + b into *out; returns true on overflow (and leaves *out untouched). */
static inline bool cllm_add_overflow(size_t a, size_t b, size_t *out) {
    size_t r;
    if (__builtin_add_overflow(a, b, &r)) return true;
    *out = r;
    return false;
}

/* A slot in [0, size) for pointer p (size a power of two): a 64-bit mix so
 * that aligned pointers spread over the table. */
static inline size_t cllm_hash_ptr(const void *p, size_t size) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (size - 1);
}

/* Rounds `x` up to a multiple of `align` (a power of two). */
static inline size_t cllm_align_up(size_t x, size_t align) {
    return (x + align - 1) & ~(align - 1);
}

#endif /* CLLM_CORE_COMMON_H */
