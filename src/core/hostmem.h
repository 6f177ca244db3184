/*
 * Host memory: every host allocation of the library goes through these
 * functions, so that one hook can count them and fail any one of them on
 * purpose (fault injection, as SQLite tests out-of-memory at every
 * allocation).
 *
 *     char *s = cllm_strdup(name);
 *     if (!s) return cllm_error(CLLM_ERR_NOMEM, "out of host memory");
 *     ...
 *     cllm_free(s);
 *
 * A NULL result always means "out of memory": a zero size allocates one
 * byte. Memory from any of these functions is released with cllm_free
 * (which is free(), so memory that left the library through an older
 * interface may still be released with free()). Mapped files (weights) are
 * not host allocations in this sense and do not pass through here.
 *
 * Fault injection (tests only):
 *
 *     cllm_hostmem_fail_at(0, false);     // count, fail nothing
 *     run_scenario();
 *     const int64_t total = cllm_hostmem_count();
 *     for (int64_t n = 1; n <= total; n++) {
 *         cllm_hostmem_fail_at(n, false); // the n-th allocation from now fails
 *         ... run_scenario() must report an error, leak nothing ...
 *     }
 *     cllm_hostmem_fail_at(-1, false);    // off: no counting, no failures
 *
 * The counter is one process-wide atomic: allocations of all threads are
 * counted, so a deterministic count needs the scenario to allocate from one
 * thread (the CPU backend's worker threads allocate nothing). When the hook
 * is off an allocation costs one relaxed atomic load more than malloc.
 */
#ifndef CLLM_CORE_HOSTMEM_H
#define CLLM_CORE_HOSTMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* malloc(size); NULL when out of memory (or when the hook fails it). */
void *cllm_malloc(size_t size);

/* calloc(n, size) with n * size checked for overflow (NULL on overflow). */
void *cllm_calloc(size_t n, size_t size);

/* realloc(p, size). On failure NULL is returned and p is left as it was
 * (still owned by the caller): never write `p = cllm_realloc(p, n)`. */
void *cllm_realloc(void *p, size_t size);

/* size bytes aligned to `align` (a power of two, at least sizeof(void *));
 * released with cllm_free. */
void *cllm_aligned_alloc(size_t align, size_t size);

/* Host memory that is read through at memory bandwidth (a backend's
 * buffers: weights that were read, KV caches, compute): as
 * cllm_aligned_alloc, and from CLLM_HOST_HUGE bytes on it starts on a
 * CLLM_HOST_HUGE boundary and, on Linux, asks for transparent huge pages
 * (madvise; a hint the kernel may ignore). With 4 KiB pages every page of
 * a weight stream costs a TLB walk, and the hardware prefetchers stop at
 * page ends. The bytes allocated are the same. */
#define CLLM_HOST_HUGE ((size_t)2 << 20)
void *cllm_aligned_alloc_huge(size_t align, size_t size);

/* A copy of the NUL-terminated string s. */
char *cllm_strdup(const char *s);

/* Releases memory from any of the above; cllm_free(NULL) does nothing. */
void cllm_free(void *p);

/*
 * The test hook. Resets the allocation counter and arms it: with n >= 1 the
 * n-th allocation from now fails (and, with `repeat`, every one after it);
 * with n == 0 allocations are only counted; with n < 0 the hook is off
 * (the default). Not meant to be called while other threads allocate.
 */
void cllm_hostmem_fail_at(int64_t n, bool repeat);

/* Allocations attempted since the last cllm_hostmem_fail_at (0 when off). */
int64_t cllm_hostmem_count(void);

/* Allocations the hook failed since the last cllm_hostmem_fail_at. */
int64_t cllm_hostmem_failures(void);

#endif /* CLLM_CORE_HOSTMEM_H */
