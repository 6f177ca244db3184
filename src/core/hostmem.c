/* Host allocations through one hook that tests can count and fail. */
#include "core/hostmem.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

/* The hook: < 0 off; 0 counting only; n > 0 fail the n-th allocation (and
 * every later one with g_repeat). */
static _Atomic int64_t g_fail_at = -1;
static _Atomic bool g_repeat;
static _Atomic int64_t g_count;
static _Atomic int64_t g_failures;

/* True when the allocation about to be made must fail. */
static bool hook_fails(void) {
    const int64_t at = atomic_load_explicit(&g_fail_at, memory_order_relaxed);
    if (at < 0) return false;
    const int64_t n = atomic_fetch_add_explicit(&g_count, 1, memory_order_relaxed) + 1;
    if (at == 0 || n < at) return false;
    if (n > at && !atomic_load_explicit(&g_repeat, memory_order_relaxed)) return false;
    atomic_fetch_add_explicit(&g_failures, 1, memory_order_relaxed);
    return true;
}

void *cllm_malloc(size_t size) { return hook_fails() ? NULL : malloc(size ? size : 1); }

void *cllm_calloc(size_t n, size_t size) {
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes)) return NULL;
    return hook_fails() ? NULL : calloc(bytes ? bytes : 1, 1);
}

void *cllm_realloc(void *p, size_t size) {
    return hook_fails() ? NULL : realloc(p, size ? size : 1);
}

void *cllm_aligned_alloc(size_t align, size_t size) {
    if (hook_fails()) return NULL;
    void *p = NULL;
    return posix_memalign(&p, align, size ? size : 1) == 0 ? p : NULL;
}

void *cllm_aligned_alloc_huge(size_t align, size_t size) {
    if (size < CLLM_HOST_HUGE || align > CLLM_HOST_HUGE) return cllm_aligned_alloc(align, size);
    void *p = cllm_aligned_alloc(CLLM_HOST_HUGE, size);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    /* whole pages of the allocation only: the hint applies to its pages */
    if (p) (void)madvise(p, size & ~(size_t)4095, MADV_HUGEPAGE);
#endif
    return p;
}

char *cllm_strdup(const char *s) {
    const size_t n = strlen(s) + 1;
    char *d = cllm_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void cllm_free(void *p) { free(p); }

void cllm_hostmem_fail_at(int64_t n, bool repeat) {
    atomic_store(&g_fail_at, -1); /* off while the counters reset */
    atomic_store(&g_count, 0);
    atomic_store(&g_failures, 0);
    atomic_store(&g_repeat, repeat);
    atomic_store(&g_fail_at, n < 0 ? -1 : n);
}

int64_t cllm_hostmem_count(void) { return atomic_load(&g_count); }

int64_t cllm_hostmem_failures(void) { return atomic_load(&g_failures); }
