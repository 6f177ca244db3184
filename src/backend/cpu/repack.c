/* The CPU's weight layouts (repack.h): which weights are stored 16 rows to
 * a group, and the rewrite, in memory the process owns or in a mapped
 * file. */
#include "backend/cpu/repack.h"
#include "core/hostmem.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/threadpool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static bool repack_enabled(void) {
    const char *env = getenv("CLLM_CPU_REPACK");
    return !(env && strcmp(env, "0") == 0);
}

/* Whole groups of 16 contiguous rows of a matrix the one-column kernels
 * read 16 at a time at this level. */
static bool x16_candidate(const cllm_tensor *t) {
    return (t->flags & CLLM_TENSOR_FLAG_MATMUL_ONLY) && !t->view_src && t->ne[2] == 1 &&
           t->ne[3] == 1 && t->ne[1] % CLLM_X16_ROWS == 0 &&
           t->nb[1] == cllm_row_size(t->type, t->ne[0]) &&
           cllm_cpu_x16_available(t->type, t->ne[0]);
}

bool cllm_cpu_init_weight(cllm_tensor *t, size_t *scratch) {
    t->layout = CLLM_CPU_LAYOUT_ROWS;
    if (!repack_enabled() || !x16_candidate(t)) return false;
    t->layout = CLLM_CPU_LAYOUT_X16;
    *scratch = CLLM_X16_ROWS * t->nb[1];
    return true;
}

/* Groups [g0, g1) of t repacked 16 rows to a group (src: its rows as the
 * file has them) into dst: another place (tmp NULL), or src itself (tmp: a
 * group's bytes). */
static void repack_groups(const cllm_tensor *t, const char *src, char *dst, char *tmp, int64_t g0,
                          int64_t g1) {
    const size_t group = CLLM_X16_ROWS * t->nb[1];
    for (int64_t r = g0 * CLLM_X16_ROWS; r < g1 * CLLM_X16_ROWS; r += CLLM_X16_ROWS) {
        const char *g = src + (size_t)r * t->nb[1];
        if (tmp) g = memcpy(tmp, g, group);
        cllm_cpu_x16_pack(t->type, t->ne[0], g, t->nb[1], dst + (size_t)r * t->nb[1]);
    }
}

/* A matrix repacked into another place by several threads: each takes a
 * share of its groups, and faults in (the kernel zeroes) the pages of its
 * share of the destination and reads its share of the file's pages, which
 * is most of a load's time; one thread would do them one after another.
 * Plain threads, joined: the caller sleeps rather than spins while they
 * finish, which a loaded machine would pay for. */
typedef struct {
    const cllm_tensor *t;
    const char *src;
    char *dst;
    int64_t g0, g1;
} repack_share;

static void *repack_share_run(void *arg) {
    const repack_share *j = arg;
    repack_groups(j->t, j->src, j->dst, NULL, j->g0, j->g1);
    return NULL;
}

/* Below this many bytes a matrix is repacked by the calling thread alone:
 * starting threads would cost more than they save. */
#define REPACK_THREADED_MIN ((size_t)1 << 20)
/* The most threads a repack takes: past a few the pages' zeroing and the
 * memory's bandwidth are shared, not multiplied. */
#define REPACK_THREADS_MAX 8

/* t repacked into dst, another place than src: on the CPUs this process
 * may use (at most REPACK_THREADS_MAX) when it is large, the calling
 * thread taking the first share and any share whose thread could not be
 * started. */
static void repack_copy(const cllm_tensor *t, const char *src, char *dst) {
    const int64_t n_groups = t->ne[1] / CLLM_X16_ROWS;
    int n =
        cllm_nbytes(t) < REPACK_THREADED_MIN ? 1 : CLLM_MIN(cllm_cpu_count(), REPACK_THREADS_MAX);
    n = (int)CLLM_MIN((int64_t)n, n_groups);
    repack_share share[REPACK_THREADS_MAX];
    pthread_t tid[REPACK_THREADS_MAX];
    bool started[REPACK_THREADS_MAX] = {false};
    for (int i = 0; i < n; i++) {
        share[i] = (repack_share){
            .t = t, .src = src, .dst = dst, .g0 = n_groups * i / n, .g1 = n_groups * (i + 1) / n};
        if (i > 0) started[i] = pthread_create(&tid[i], NULL, repack_share_run, &share[i]) == 0;
    }
    for (int i = 0; i < n; i++) {
        if (!started[i]) repack_share_run(&share[i]);
    }
    for (int i = 1; i < n; i++) {
        if (started[i]) pthread_join(tid[i], NULL);
    }
}

/*
 * t, part of the file's read-only mapping, repacked: its pages are replaced
 * by anonymous memory that holds t repacked (and the other bytes of its
 * first and last page as they were), on transparent huge pages where whole
 * 2 MiB pieces of it are. Writing the mapping in place would copy its pages
 * one by one on write into scattered 4 KiB pages, which the kernels read
 * more slowly. False if it could not be done (nothing changed).
 */
static bool repack_mapped(const cllm_tensor *t) {
#if defined(__linux__) && defined(MREMAP_FIXED)
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), h = CLLM_HOST_HUGE;
    char *data = t->data, *end = data + cllm_nbytes(t);
    char *lo = (char *)((uintptr_t)data / page * page);
    char *hi = (char *)(((uintptr_t)end + page - 1) / page * page);
    const size_t span = (size_t)(hi - lo);
    char *r = mmap(NULL, span + h, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) return false;
    /* at the same place in a 2 MiB piece as lo, so that huge pages stay */
    char *a = r + (((uintptr_t)lo - (uintptr_t)r) & (h - 1));
#if defined(MADV_HUGEPAGE)
    (void)madvise(a, span, MADV_HUGEPAGE);
#endif
    memcpy(a, lo, (size_t)(data - lo));
    memcpy(a + (end - lo), end, (size_t)(hi - end));
    repack_copy(t, data, a + (data - lo));
    if (mremap(a, span, span, MREMAP_MAYMOVE | MREMAP_FIXED, lo) == MAP_FAILED) {
        munmap(r, span + h);
        return false;
    }
    if (a > r) munmap(r, (size_t)(a - r));
    if (a + span < r + span + h) munmap(a + span, (size_t)(r + span + h - (a + span)));
    (void)mprotect(lo, span, PROT_READ);
    return true;
#else
    (void)t;
    return false;
#endif
}

bool cllm_cpu_convert_weight(cllm_tensor *t, void *scratch, bool file_mapped) {
    CLLM_ASSERT(t->layout == CLLM_CPU_LAYOUT_X16 && t->data);
    if (!file_mapped) {
        repack_groups(t, t->data, t->data, scratch, 0, t->ne[1] / CLLM_X16_ROWS);
        return true;
    }
    if (repack_mapped(t)) return true;
    /* else in place, its pages copied on write */
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *lo = (char *)((uintptr_t)t->data / page * page);
    const size_t span = (size_t)((char *)t->data + cllm_nbytes(t) - lo);
    if (mprotect(lo, span, PROT_READ | PROT_WRITE) != 0) {
        t->layout = CLLM_CPU_LAYOUT_ROWS; /* stays as the file has it */
        return false;
    }
    repack_groups(t, t->data, t->data, scratch, 0, t->ne[1] / CLLM_X16_ROWS);
    (void)mprotect(lo, span, PROT_READ);
    return true;
}
