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

/* Prints "<name>: N passed, M failed" and returns the exit status. */
int check_summary(const char *name);

#endif /* CLLM_TESTS_CHECK_H */
