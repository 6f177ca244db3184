/*
 * A minimal test harness: CHECK* macros count failures and print file:line;
 * a test's main returns check_summary() ("N passed, M failed").
 */
#ifndef CLLM_TESTS_CHECK_H
#define CLLM_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>

extern int g_checks_passed;
extern int g_checks_failed;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond) {                                                                                \
            g_checks_passed++;                                                                     \
        } else {                                                                                   \
            g_checks_failed++;                                                                     \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

/* CHECK with a printf-style explanation printed on failure. */
#define CHECKF(cond, ...)                                                                          \
    do {                                                                                           \
        if (cond) {                                                                                \
            g_checks_passed++;                                                                     \
        } else {                                                                                   \
            g_checks_failed++;                                                                     \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    CHECKF((long long)(a) == (long long)(b), "%lld != %lld", (long long)(a), (long long)(b))

#define CHECK_NEAR(a, b, tol)                                                                      \
    CHECKF(fabs((double)(a) - (double)(b)) <= (tol), "%.9g vs %.9g (tol %.3g)", (double)(a),       \
           (double)(b), (double)(tol))

/* Runs fn in a child process; true if it aborted (SIGABRT) with `needle`
 * in what it wrote to stderr. For the always-on asserts. */
#include <stdbool.h>
bool check_aborts_with(void (*fn)(void), const char *needle);

/* CHECK_SANITIZED: 1 in a build with AddressSanitizer, ThreadSanitizer or
 * MemorySanitizer (shadow memory, quarantines, and 3-50x slower), else 0.
 * Tests leave out there what measures memory, and the long runs of real
 * models whose code the release run and shorter sanitized cases cover. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CHECK_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||                         \
    __has_feature(memory_sanitizer)
#define CHECK_SANITIZED 1
#endif
#endif
#ifndef CHECK_SANITIZED
#define CHECK_SANITIZED 0
#endif

/* The exit status of a test that could not run everything because something
 * outside the repository is missing: an optional library cllm was built
 * without, or a model fetched from PyPI (the small models are in
 * tests/data). CTest reports it as skipped (SKIP_RETURN_CODE in
 * CMakeLists.txt), neither passed nor failed. */
#define CHECK_SKIP 77

/* Records that `what` is missing: a path, or a library with the Debian
 * package that provides it; the caller skips the checks that need it. At
 * most 32 are named. */
void check_missing(const char *what);

/*
 * Prints "<name>: N passed, M failed" and returns the exit status: 1 if a
 * check failed; else, if data was missing (check_missing), names it and
 * returns CHECK_SKIP, or 1 when CLLM_REQUIRE_TEST_DATA is set to anything
 * but "" or "0" (CI, which must run every test); else 0.
 */
int check_summary(const char *name);

#endif /* CLLM_TESTS_CHECK_H */
