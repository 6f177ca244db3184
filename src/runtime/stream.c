/* Streamed layers (stream.h): the slot layout, the I/O thread that fills
 * the ring, the gates that make the executor wait for a layer, and the
 * read-bandwidth probe. */
#include "core/hostmem.h"
#include "runtime/stream.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Tensors of one layer closer than this in the file are read with one call
 * (the gap read and thrown away) rather than two. */
#define RUN_GAP ((uint64_t)64 << 10)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- layout ------------------------------------------------------------ */

typedef struct span {
    uint64_t off; /* absolute file offset */
    size_t size;
    int weight; /* index in w->ctx */
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

void cllm_stream_layout_free(cllm_stream_layout *lay) {
    if (!lay) return;
    cllm_free(lay->layers);
    cllm_free(lay->runs);
    cllm_free(lay->weight_layer);
    cllm_free(lay->weight_off);
    memset(lay, 0, sizeof(*lay));
}

cllm_status cllm_stream_layout_init(cllm_stream_layout *lay, const cllm_gguf *g,
                                    const cllm_weights *w, const cllm_placement *pl, int n_slots) {
    memset(lay, 0, sizeof(*lay));
    if (n_slots < 2 || n_slots > CLLM_STREAM_MAX_SLOTS) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "stream: %d slots is out of range [2, %d]", n_slots,
                          CLLM_STREAM_MAX_SLOTS);
    }
    const int n_w = cllm_context_n_tensors(w->ctx);
    const int n_str = cllm_placement_n_streamed(pl);
    span *spans = NULL;
    int *layer_index = NULL;
    lay->n_weights = n_w;
    lay->weight_layer = cllm_malloc((size_t)CLLM_MAX(n_w, 1) * sizeof(int));
    lay->weight_off = cllm_calloc((size_t)CLLM_MAX(n_w, 1), sizeof(size_t));
    lay->layers = cllm_calloc((size_t)CLLM_MAX(n_str, 1), sizeof(*lay->layers));
    lay->runs =
        cllm_calloc((size_t)CLLM_MAX(n_w, 1), sizeof(*lay->runs)); /* a run per tensor at most */
    spans = cllm_malloc((size_t)CLLM_MAX(n_w, 1) * sizeof(*spans));
    layer_index = cllm_malloc((size_t)CLLM_MAX(pl->n_layer, 1) * sizeof(int));
    if (!lay->weight_layer || !lay->weight_off || !lay->layers || !lay->runs || !spans ||
        !layer_index) {
        cllm_free(spans);
        cllm_free(layer_index);
        cllm_stream_layout_free(lay);
        return cllm_error(CLLM_ERR_NOMEM, "stream: out of host memory");
    }
    for (int l = 0; l < pl->n_layer; l++) {
        layer_index[l] = -1;
        if (pl->streamed && pl->streamed[l]) {
            layer_index[l] = lay->n_layers;
            lay->layers[lay->n_layers++].layer = l;
        }
    }
    /* the streamed weights of each streamed layer, in one pass (a planner
     * lays out many candidate splits): spans[at[j] .. at[j + 1]) */
    for (int i = 0; i < n_w; i++) lay->weight_layer[i] = -1;
    const uint64_t data = cllm_gguf_data_offset(g);
    int *at = cllm_calloc((size_t)lay->n_layers + 2, sizeof(int));
    if (!at) {
        cllm_free(spans);
        cllm_free(layer_index);
        cllm_stream_layout_free(lay);
        return cllm_error(CLLM_ERR_NOMEM, "stream: out of host memory");
    }
    for (int i = 0; i < n_w; i++) {
        /* (a weight its streamed layer keeps resident is the CPU's) */
        if (!cllm_placement_weight_streamed(pl, w, i)) continue;
        at[layer_index[cllm_weights_group(w, i)] + 2]++;
    }
    for (int j = 0; j < lay->n_layers; j++) at[j + 2] += at[j + 1];
    for (int i = 0; i < n_w; i++) {
        if (!cllm_placement_weight_streamed(pl, w, i)) continue;
        const int j = layer_index[cllm_weights_group(w, i)];
        const cllm_tensor *t = cllm_context_tensor(w->ctx, i);
        const cllm_gguf_tensor_info *ti = cllm_gguf_tensor(g, cllm_gguf_find_tensor(g, t->name));
        spans[at[j + 1]++] = (span){.off = data + ti->offset, .size = ti->size, .weight = i};
        lay->weight_layer[i] = j;
        lay->layers[j].bytes += ti->size;
    }
    for (int j = 0; j < lay->n_layers; j++) {
        cllm_stream_layer *sl = &lay->layers[j];
        span *sp = spans + at[j];
        const int n = at[j + 1] - at[j];
        if (n == 0) {
            cllm_free(at);
            cllm_free(spans);
            cllm_free(layer_index);
            cllm_stream_layout_free(lay);
            return cllm_error(CLLM_ERR_INVALID_ARG,
                              "stream: streamed layer %d keeps every weight resident", sl->layer);
        }
        qsort(sp, (size_t)n, sizeof(*sp), span_cmp);
        sl->first_run = lay->n_runs;
        size_t slot_off = 0;
        for (int a = 0; a < n;) {
            uint64_t end = sp[a].off + sp[a].size;
            int b = a + 1;
            while (b < n && sp[b].off <= end + RUN_GAP) {
                end = CLLM_MAX(end, sp[b].off + sp[b].size);
                b++;
            }
            cllm_stream_run *r = &lay->runs[lay->n_runs++];
            r->file_off = sp[a].off / CLLM_STREAM_BLOCK * CLLM_STREAM_BLOCK;
            r->len = (size_t)(cllm_align_up((size_t)end, CLLM_STREAM_BLOCK) - r->file_off);
            r->slot_off = slot_off;
            r->need_end = end;
            for (int c = a; c < b; c++) {
                lay->weight_off[sp[c].weight] = slot_off + (size_t)(sp[c].off - r->file_off);
            }
            slot_off += r->len;
            lay->read_bytes += r->len;
            a = b;
        }
        sl->n_runs = lay->n_runs - sl->first_run;
        lay->slot_bytes = CLLM_MAX(lay->slot_bytes, slot_off);
        lay->tensor_bytes += sl->bytes;
    }
    lay->n_slots = lay->n_layers ? CLLM_MIN(n_slots, lay->n_layers) : 0;
    lay->ring_bytes = (size_t)lay->n_slots * lay->slot_bytes;
    cllm_free(at);
    cllm_free(spans);
    cllm_free(layer_index);
    return CLLM_OK;
}

void cllm_stream_place(const cllm_stream_layout *lay, const cllm_weights *w, cllm_buffer *ring) {
    for (int i = 0; i < lay->n_weights; i++) {
        const int j = lay->weight_layer[i];
        if (j < 0) continue;
        const size_t slot = (size_t)(j % lay->n_slots);
        cllm_buffer_place_tensor(ring, cllm_context_tensor(w->ctx, i),
                                 slot * lay->slot_bytes + lay->weight_off[i]);
    }
}

/* ---- the ring ----------------------------------------------------------- */

typedef struct tensor_layer {
    const cllm_tensor *t;
    int j;
} tensor_layer;

static int tl_cmp(const void *a, const void *b) {
    const uintptr_t x = (uintptr_t)((const tensor_layer *)a)->t;
    const uintptr_t y = (uintptr_t)((const tensor_layer *)b)->t;
    return x < y ? -1 : x > y;
}

typedef struct gate_ev {
    int node; /* index in the graph's nodes */
    bool after;
    int j;
} gate_ev;

static int ev_cmp(const void *a, const void *b) {
    const gate_ev *x = a, *y = b;
    if (x->node != y->node) return x->node < y->node ? -1 : 1;
    if (x->after != y->after) return x->after ? 1 : -1;
    return x->j < y->j ? -1 : x->j > y->j;
}

/* ---- reads in pieces, several in flight ----------------------------------- */

/* The queue depth and piece size of the reads made next (process-wide; 0:
 * the defaults). Read when a stream or a probe starts. */
static int g_reads_qd;
static size_t g_reads_piece;

void cllm_stream_reads_set(int queue_depth, size_t piece) {
    g_reads_qd = queue_depth;
    g_reads_piece = piece;
}

static int reads_qd(int qd) {
    if (qd <= 0) qd = g_reads_qd > 0 ? g_reads_qd : CLLM_STREAM_QD;
    return CLLM_MIN(qd, CLLM_STREAM_MAX_QD);
}

static size_t reads_piece(size_t piece) {
    if (!piece) piece = g_reads_piece ? g_reads_piece : CLLM_STREAM_PIECE;
    return cllm_align_up(CLLM_MAX(piece, CLLM_STREAM_BLOCK), CLLM_STREAM_BLOCK);
}

/* One read of a run's bytes: [off, off + len) into dst; the first `need`
 * bytes must be there (the rest may lie past the end of the file). */
typedef struct rd_piece {
    uint64_t off;
    size_t len, need;
    char *dst;
    size_t got;    /* out */
    size_t cached; /* out: of got, copied from the page cache (read_piece) */
    int err;       /* out: an errno, or 0 */
} rd_piece;

/* A pool of qd - 1 reader threads; the thread that runs a job reads too. */
typedef struct rd_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv, done_cv;
    pthread_t th[CLLM_STREAM_MAX_QD];
    int n_th;
    bool stop;
    /* the job, under mu */
    rd_piece *p;
    int n, next, n_done;
    int fd, fd_cached;
    bool direct;
} rd_pool;

#if !defined(__NR_cachestat) && (defined(__x86_64__) || defined(__aarch64__))
#define __NR_cachestat 451 /* Linux 6.5; the same number on these architectures */
#endif

/* Whether the page cache holds every page of [off, off + len) of fd:
 * cachestat(2) (Linux 6.5 on), else mincore(2) over a mapping of the range,
 * which reports the page cache only to the file's owner or a writer (to
 * others nothing is cached, and storage serves every read). Neither reads
 * the file or starts a readahead (a read with RWF_NOWAIT does start one). */
static bool all_cached(int fd, uint64_t off, size_t len) {
    const size_t page = 4096;
    const uint64_t first = off / page * page;
    const size_t n_pages = (size_t)((off + len - first + page - 1) / page);
#ifdef __NR_cachestat
    struct {
        uint64_t off, len;
    } range = {first, (uint64_t)n_pages * page};
    struct {
        uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
    } cs;
    if (syscall(__NR_cachestat, fd, &range, &cs, 0) == 0) return cs.nr_cache >= n_pages;
    if (errno != ENOSYS) return false;
#endif
    void *map = mmap(NULL, n_pages * page, PROT_READ, MAP_SHARED, fd, (off_t)first);
    if (map == MAP_FAILED) return false;
    unsigned char vec[1024];
    bool all = true;
    for (size_t at = 0; all && at < n_pages; at += sizeof(vec)) {
        const size_t n = CLLM_MIN(sizeof(vec), n_pages - at);
        all = mincore((char *)map + at * page, n * page, vec) == 0;
        for (size_t k = 0; all && k < n; k++) all = vec[k] & 1;
    }
    munmap(map, n_pages * page);
    return all;
}

/* Copies the piece from the page cache with fd_cached (a buffered
 * descriptor without readahead) where the cache holds all of its required
 * bytes: pages another process read (a warm cache, charged to whoever read
 * them) are copied at memory speed and left where they are. Returns the
 * bytes copied (0: read it from storage), rounded down to a block where
 * direct reads go on from there. */
static size_t read_cached(int fd_cached, bool direct, rd_piece *p) {
    if (fd_cached < 0 || !p->need || !all_cached(fd_cached, p->off, p->need)) return 0;
    size_t got = 0;
    while (got < p->len) {
        const ssize_t n = pread(fd_cached, p->dst + got, p->len - got, (off_t)(p->off + got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break; /* the end of the file, or an error storage reports again */
        got += (size_t)n;
    }
    return direct ? got / CLLM_STREAM_BLOCK * CLLM_STREAM_BLOCK : got;
}

/* Reads piece p: first what the page cache holds (fd_cached >= 0), then
 * the rest from fd. */
static void read_piece(int fd, bool direct, int fd_cached, rd_piece *p) {
    size_t got = read_cached(fd_cached, direct, p);
    p->cached = got;
    p->err = 0;
    while (got < p->len) {
        const ssize_t n = pread(fd, p->dst + got, p->len - got, (off_t)(p->off + got));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            p->err = errno;
            break;
        }
        if (n == 0) break;
        got += (size_t)n;
        if (direct && (size_t)n % CLLM_STREAM_BLOCK) break; /* end of file */
    }
    p->got = got;
    /* the pages read leave the cache (a layer is read again a pass later,
     * and the budget counts no cache); those found there stay */
    if (!direct && got > p->cached) {
        posix_fadvise(fd, (off_t)(p->off + p->cached), (off_t)(got - p->cached),
                      POSIX_FADV_DONTNEED);
    }
}

/* Under mu: reads pieces of the job until none is left. */
static void pool_work_locked(rd_pool *pool) {
    while (pool->next < pool->n) {
        rd_piece *p = &pool->p[pool->next++];
        const int fd = pool->fd, fd_cached = pool->fd_cached;
        const bool direct = pool->direct;
        pthread_mutex_unlock(&pool->mu);
        read_piece(fd, direct, fd_cached, p);
        pthread_mutex_lock(&pool->mu);
        if (++pool->n_done == pool->n) pthread_cond_broadcast(&pool->done_cv);
    }
}

static void *pool_main(void *arg) {
    rd_pool *pool = arg;
    pthread_mutex_lock(&pool->mu);
    while (!pool->stop) {
        if (pool->next >= pool->n) {
            pthread_cond_wait(&pool->cv, &pool->mu);
            continue;
        }
        pool_work_locked(pool);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

static void pool_stop(rd_pool *pool) {
    pthread_mutex_lock(&pool->mu);
    pool->stop = true;
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->n_th; i++) pthread_join(pool->th[i], NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
    pthread_cond_destroy(&pool->done_cv);
}

/* Starts qd - 1 readers (fewer if threads cannot be made: the reads are
 * then shared among fewer). */
static void pool_start(rd_pool *pool, int qd) {
    memset(pool, 0, sizeof(*pool));
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    pthread_cond_init(&pool->done_cv, NULL);
    for (int i = 0; i < qd - 1; i++) {
        if (pthread_create(&pool->th[pool->n_th], NULL, pool_main, pool) != 0) break;
        pool->n_th++;
    }
}

/* Reads the n pieces p with fd (and fd_cached, see read_piece), every reader
 * of the pool at once, and returns when all are read (each with its got and
 * err). */
static void pool_run(rd_pool *pool, int fd, bool direct, int fd_cached, rd_piece *p, int n) {
    if (n <= 0) return;
    pthread_mutex_lock(&pool->mu);
    pool->p = p;
    pool->n = n;
    pool->next = pool->n_done = 0;
    pool->fd = fd;
    pool->fd_cached = fd_cached;
    pool->direct = direct;
    /* as many readers as there are pieces besides the one this thread
     * reads: a layer of one piece (a small streamed part) wakes none */
    for (int i = 0; i < CLLM_MIN(n - 1, pool->n_th); i++) pthread_cond_signal(&pool->cv);
    pool_work_locked(pool);
    while (pool->n_done < pool->n) pthread_cond_wait(&pool->done_cv, &pool->mu);
    pool->p = NULL;
    pool->n = pool->next = pool->n_done = 0;
    pthread_mutex_unlock(&pool->mu);
}

/* Splits [off, off + len) (into dst; `need` bytes of it required) into
 * pieces of at most `piece` bytes at p; returns how many. */
static int split_pieces(rd_piece *p, uint64_t off, size_t len, size_t need, char *dst,
                        size_t piece) {
    int n = 0;
    for (size_t at = 0, l = 0; at < len; at += l, n++) {
        l = CLLM_MIN(piece, len - at);
        p[n] = (rd_piece){.off = off + at,
                          .len = l,
                          .need = need > at ? CLLM_MIN(need - at, l) : 0,
                          .dst = dst + at};
    }
    return n;
}

static int n_pieces(size_t len, size_t piece) { return (int)((len + piece - 1) / piece); }

/* Streamed layers are copied from the page cache where it holds them
 * (read_cached) unless CLLM_STREAM_PAGE_CACHE=0: to measure storage alone. */
static bool page_cache_on(void) {
    const char *e = getenv("CLLM_STREAM_PAGE_CACHE");
    return !(e && !strcmp(e, "0"));
}

struct cllm_stream {
    const cllm_stream_layout *lay;
    const cllm_weights *w;
    cllm_device *dev; /* the ring's */
    char *path;
    int fd;
    int fd_cached; /* buffered, for what the page cache holds (read_cached); -1: none */
    bool direct;
    rd_pool pool; /* the I/O thread's readers */
    bool pool_started;
    size_t piece;     /* bytes per read */
    rd_piece *pieces; /* a layer's reads */
    void *ring;
    cllm_buffer *buf;
    tensor_layer *tl; /* streamed weights by address, for the gates */
    int n_tl;
    bool any_layout; /* some streamed weight is stored in a layout of the device's */
    void *scratch;   /* for the I/O thread's conversions (cllm_device_convert_weight) */
    /* per streamed layer, the sum of its bytes at its first read, which
     * every later read must match (the I/O thread's alone) */
    uint64_t *sums;
    bool *summed;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_mutex_t pass_mu;
    pthread_t io;
    bool io_started;
    /* under mu */
    bool stop;
    bool reading;
    bool reopen;                           /* open the path again before the next read */
    bool paused;                           /* after a reset, no reads until a pass begins */
    bool direct_seen;                      /* direct I/O used by the last read (for reports) */
    uint64_t gen;                          /* bumped by a reset: a read in flight is thrown away */
    int next;                              /* the streamed layer the I/O thread reads next */
    bool keep_all;                         /* no more layers than slots: each read once */
    int slot_layer[CLLM_STREAM_MAX_SLOTS]; /* layer held (ready), or -1 */
    bool slot_failed[CLLM_STREAM_MAX_SLOTS];
    char slot_err[CLLM_STREAM_MAX_SLOTS][256];
    bool read_failed;   /* the last pass failed on a read; until one succeeds */
    char read_err[512]; /* its message */
    uint64_t bytes_read;
    uint64_t bytes_cached; /* of bytes_read, copied from the page cache */
    uint64_t passes;       /* passes that read every streamed layer (ended well) */
    double wait_s;
    double read_s; /* the I/O thread's time in reads */

    /* the pass in progress */
    cllm_sched_gate *gates;
    gate_ev *evs;
    int *first, *last;
    int cap_gates;
    int n_released;
};

/* Reads streamed layer sl into slot, its runs split into pieces that the
 * pool's readers read at once: what the page cache holds copied from it,
 * the rest with O_DIRECT, or pread + DONTNEED; adds the bytes read to
 * *n_read, those of them found in the page cache to *n_cached. False with
 * the reason in err. */
static bool read_layer(cllm_stream *st, const cllm_stream_layer *sl, char *slot, uint64_t *n_read,
                       uint64_t *n_cached, char *err, size_t err_size) {
    const cllm_stream_layout *lay = st->lay;
    for (;;) {
        int n = 0;
        for (int r = sl->first_run; r < sl->first_run + sl->n_runs; r++) {
            const cllm_stream_run *run = &lay->runs[r];
            n += split_pieces(st->pieces + n, run->file_off, run->len,
                              (size_t)(run->need_end - run->file_off), slot + run->slot_off,
                              st->direct ? st->piece : run->len);
        }
        if (st->direct) {
            pool_run(&st->pool, st->fd, true, st->fd_cached, st->pieces, n);
        } else {
            /* buffered: one reader, whole runs, so that the kernel's
             * readahead runs ahead of it (several readers, each dropping
             * what it read, measured at half the rate: bench_read) */
            for (int i = 0; i < n; i++) read_piece(st->fd, false, st->fd_cached, &st->pieces[i]);
        }
        bool refused = false;
        int e = 0;
        uint64_t got = 0, cached = 0;
        const rd_piece *short_p = NULL;
        for (int i = 0; i < n; i++) {
            const rd_piece *p = &st->pieces[i];
            got += p->got;
            cached += p->cached;
            if (p->err == EINVAL && st->direct) {
                refused = true;
            } else if (p->err) {
                if (!e) e = p->err;
            } else if (p->got < p->need && !short_p) {
                short_p = p;
            }
        }
        if (refused) {
            /* the file system refuses direct I/O after all: fall back */
            const int fd = open(st->path, O_RDONLY | O_CLOEXEC);
            if (fd < 0) {
                snprintf(err, err_size, "%s", strerror(errno));
                return false;
            }
            posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
            close(st->fd);
            st->fd = fd;
            st->direct = false;
            continue;
        }
        if (e) {
            snprintf(err, err_size, "%s", strerror(e));
            return false;
        }
        if (short_p) {
            struct stat sb;
            const long long size = fstat(st->fd, &sb) == 0 ? (long long)sb.st_size : -1;
            snprintf(err, err_size,
                     "the file ends at byte %lld but the layer's weights reach byte %llu (was it "
                     "truncated or replaced?)",
                     size, (unsigned long long)(short_p->off + short_p->need));
            return false;
        }
        *n_read += got;
        *n_cached += cached;
        return true;
    }
}

/* The descriptor for what the page cache holds (read_cached): buffered,
 * with no readahead, so that a page evicted between the check and the read
 * is read alone. */
static void open_cached(cllm_stream *st) {
    st->fd_cached = open(st->path, O_RDONLY | O_CLOEXEC);
    if (st->fd_cached >= 0) posix_fadvise(st->fd_cached, 0, 0, POSIX_FADV_RANDOM);
}

/* Opens the path again (direct I/O when it can); keeps the old descriptor
 * if that fails (the next read then reports the error). */
static void reopen_file(cllm_stream *st) {
    int fd = open(st->path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    bool direct = fd >= 0;
    if (fd < 0) fd = open(st->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    if (!direct) posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    close(st->fd);
    st->fd = fd;
    st->direct = direct;
    if (st->fd_cached >= 0) { /* the same file as fd, or none */
        close(st->fd_cached);
        open_cached(st);
    }
}

/* A sum of n bytes (n a multiple of 8 or not), four lanes so that the
 * multiplies overlap: it only has to tell a layer's bytes from others. */
static uint64_t sum_bytes(const unsigned char *p, size_t n, uint64_t h) {
    const uint64_t k = 0x9e3779b97f4a7c15u;
    uint64_t a = h ^ 1, b = h ^ 2, c = h ^ 3, d = h ^ 4, w[4];
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        memcpy(w, p + i, 32);
        a = (a ^ w[0]) * k, b = (b ^ w[1]) * k, c = (c ^ w[2]) * k, d = (d ^ w[3]) * k;
        a ^= a >> 29, b ^= b >> 29, c ^= c >> 29, d ^= d >> 29;
    }
    for (; i < n; i++) a = (a ^ p[i]) * k;
    return (a ^ (b * 3) ^ (c * 5) ^ (d * 7) ^ n) * k;
}

/* Whether layer j read into slot holds the bytes its first read had (the
 * first read records them). */
static bool same_as_first(cllm_stream *st, int j, const char *slot) {
    const cllm_stream_layer *sl = &st->lay->layers[j];
    uint64_t h = 0;
    for (int r = sl->first_run; r < sl->first_run + sl->n_runs; r++) {
        const cllm_stream_run *run = &st->lay->runs[r];
        h = sum_bytes((const unsigned char *)slot + run->slot_off,
                      (size_t)(run->need_end - run->file_off), h);
    }
    if (!st->summed[j]) {
        st->sums[j] = h;
        st->summed[j] = true;
        return true;
    }
    return st->sums[j] == h;
}

static void *io_main(void *arg) {
    cllm_stream *st = arg;
    const cllm_stream_layout *lay = st->lay;
    char err[256];
    pthread_mutex_lock(&st->mu);
    while (!st->stop) {
        const int j = st->next;
        if (st->paused || (st->keep_all && j >= lay->n_layers)) {
            pthread_cond_wait(&st->cv, &st->mu);
            continue;
        }
        const int s = j % lay->n_slots;
        if (st->slot_layer[s] != -1) {
            pthread_cond_wait(&st->cv, &st->mu);
            continue;
        }
        const uint64_t gen = st->gen;
        const bool reopen = st->reopen;
        st->reopen = false;
        st->reading = true;
        pthread_mutex_unlock(&st->mu);
        if (reopen) reopen_file(st); /* after a failed pass: the path may name a new file */

        const cllm_stream_layer *sl = &lay->layers[j];
        char *slot = (char *)st->ring + (size_t)s * lay->slot_bytes;
        uint64_t n_read = 0, n_cached = 0;
        err[0] = '\0';
        const double t_read = now_s();
        bool ok = read_layer(st, sl, slot, &n_read, &n_cached, err, sizeof(err));
        const double dt_read = now_s() - t_read;
        /* a file overwritten in place reads other bytes: refused, as a
         * truncated one (written back as it was, it reads well again) */
        if (ok && !same_as_first(st, j, slot)) {
            ok = false;
            snprintf(err, sizeof(err),
                     "its bytes differ from those read before (was the file modified in "
                     "place?)");
        }
        /* the layer's weights in the layout the device chose for them, as
         * a resident layer's: a pass reads the same bytes either way */
        for (int i = 0; i < lay->n_weights && ok && st->any_layout; i++) {
            if (lay->weight_layer[i] == j) {
                (void)cllm_device_convert_weight(st->dev, cllm_context_tensor(st->w->ctx, i),
                                                 st->scratch, false);
            }
        }

        pthread_mutex_lock(&st->mu);
        st->reading = false;
        st->bytes_read += n_read;
        st->bytes_cached += n_cached;
        st->read_s += dt_read;
        st->direct_seen = st->direct;
        if (st->gen == gen) {
            st->slot_layer[s] = j;
            st->slot_failed[s] = !ok;
            snprintf(st->slot_err[s], sizeof(st->slot_err[s]), "%s", err);
            st->next = st->keep_all ? j + 1 : (j + 1) % lay->n_layers;
        }
        pthread_cond_broadcast(&st->cv);
    }
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

/* Under mu: forget every slot; the I/O thread starts again at layer 0. */
static void reset_locked(cllm_stream *st) {
    st->gen++;
    while (st->reading) pthread_cond_wait(&st->cv, &st->mu);
    for (int s = 0; s < CLLM_STREAM_MAX_SLOTS; s++) {
        st->slot_layer[s] = -1;
        st->slot_failed[s] = false;
    }
    st->next = 0;
    st->reopen = true;
    st->paused = true; /* until the next pass: its reads are then fresh */
    pthread_cond_broadcast(&st->cv);
}

cllm_status cllm_stream_new(const char *path, cllm_device *dev, const cllm_weights *w,
                            const cllm_stream_layout *lay, cllm_stream **out) {
    if (lay->n_layers == 0) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "stream: no streamed layers");
    }
    cllm_stream *st = cllm_calloc(1, sizeof(*st));
    if (!st) return cllm_error(CLLM_ERR_NOMEM, "stream: out of host memory");
    cllm_status rc = CLLM_ERR_NOMEM;
    st->fd = st->fd_cached = -1;
    st->lay = lay;
    st->w = w;
    st->dev = dev;
    st->keep_all = lay->n_layers <= lay->n_slots;
    for (int s = 0; s < CLLM_STREAM_MAX_SLOTS; s++) st->slot_layer[s] = -1;
    st->path = cllm_strdup(path);
    st->ring = cllm_aligned_alloc(CLLM_STREAM_BLOCK, lay->ring_bytes);
    st->tl = cllm_malloc((size_t)CLLM_MAX(lay->n_weights, 1) * sizeof(*st->tl));
    st->sums = cllm_calloc((size_t)lay->n_layers, sizeof(*st->sums));
    st->summed = cllm_calloc((size_t)lay->n_layers, sizeof(*st->summed));
    st->piece = reads_piece(0);
    int max_pieces = 1;
    for (int j = 0; j < lay->n_layers; j++) {
        const cllm_stream_layer *sl = &lay->layers[j];
        int n = 0;
        for (int r = sl->first_run; r < sl->first_run + sl->n_runs; r++) {
            n += n_pieces(lay->runs[r].len, st->piece);
        }
        max_pieces = CLLM_MAX(max_pieces, n);
    }
    st->pieces = cllm_malloc((size_t)max_pieces * sizeof(*st->pieces));
    if (!st->path || !st->ring || !st->tl || !st->sums || !st->summed || !st->pieces) {
        cllm_error(rc, "stream: out of host memory for a ring of %zu bytes", lay->ring_bytes);
        goto fail;
    }
    for (int i = 0; i < lay->n_weights; i++) {
        if (lay->weight_layer[i] < 0) continue;
        st->tl[st->n_tl++] = (tensor_layer){cllm_context_tensor(w->ctx, i), lay->weight_layer[i]};
    }
    qsort(st->tl, (size_t)st->n_tl, sizeof(*st->tl), tl_cmp);
    if ((rc = cllm_device_buffer_from_host_ptr(dev, st->ring, lay->ring_bytes, CLLM_MEM_WEIGHTS,
                                               &st->buf)) != CLLM_OK) {
        goto fail;
    }
    /* each streamed tensor at its fixed place in the ring, in the layout
     * its device chooses, before the I/O thread starts */
    cllm_stream_place(lay, w, st->buf);
    size_t scratch_size = 0;
    for (int i = 0; i < lay->n_weights; i++) {
        size_t need = 0;
        if (lay->weight_layer[i] >= 0 &&
            cllm_device_init_weight(dev, cllm_context_tensor(w->ctx, i), &need)) {
            st->any_layout = true;
            scratch_size = CLLM_MAX(scratch_size, need);
        }
    }
    if (scratch_size && !(st->scratch = cllm_malloc(scratch_size))) {
        rc = cllm_error(CLLM_ERR_NOMEM, "stream: out of host memory");
        goto fail;
    }
    st->fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    st->direct = st->direct_seen = st->fd >= 0;
    if (st->fd < 0) {
        st->fd = open(path, O_RDONLY | O_CLOEXEC);
        if (st->fd >= 0) posix_fadvise(st->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    }
    if (st->fd < 0) {
        rc = cllm_error(CLLM_ERR_IO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (page_cache_on()) open_cached(st);
    pool_start(&st->pool, reads_qd(0));
    st->pool_started = true;
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    pthread_mutex_init(&st->pass_mu, NULL);
    if (pthread_create(&st->io, NULL, io_main, st) != 0) {
        rc = cllm_error(CLLM_ERR_BACKEND, "stream: cannot start the I/O thread");
        pthread_mutex_destroy(&st->mu);
        pthread_cond_destroy(&st->cv);
        pthread_mutex_destroy(&st->pass_mu);
        goto fail;
    }
    st->io_started = true;
    *out = st;
    return CLLM_OK;
fail:
    for (int i = 0; st->buf && i < lay->n_weights; i++) { /* w as it was */
        if (lay->weight_layer[i] < 0) continue;
        cllm_tensor *t = cllm_context_tensor(w->ctx, i);
        t->buffer = NULL, t->data = NULL, t->layout = 0;
    }
    if (st->pool_started) pool_stop(&st->pool);
    if (st->fd >= 0) close(st->fd);
    if (st->fd_cached >= 0) close(st->fd_cached);
    cllm_buffer_free(st->buf);
    cllm_free(st->scratch);
    cllm_free(st->ring);
    cllm_free(st->tl);
    cllm_free(st->sums);
    cllm_free(st->summed);
    cllm_free(st->pieces);
    cllm_free(st->path);
    cllm_free(st);
    return rc;
}

void cllm_stream_free(cllm_stream *st) {
    if (!st) return;
    if (st->io_started) {
        pthread_mutex_lock(&st->mu);
        st->stop = true;
        st->gen++;
        pthread_cond_broadcast(&st->cv);
        pthread_mutex_unlock(&st->mu);
        pthread_join(st->io, NULL);
        pthread_mutex_destroy(&st->mu);
        pthread_cond_destroy(&st->cv);
        pthread_mutex_destroy(&st->pass_mu);
    }
    if (st->pool_started) pool_stop(&st->pool);
    if (st->fd >= 0) close(st->fd);
    if (st->fd_cached >= 0) close(st->fd_cached);
    cllm_free(st->pieces);
    cllm_buffer_free(st->buf);
    cllm_free(st->scratch);
    cllm_free(st->ring);
    cllm_free(st->tl);
    cllm_free(st->sums);
    cllm_free(st->summed);
    cllm_free(st->gates);
    cllm_free(st->evs);
    cllm_free(st->first);
    cllm_free(st->last);
    cllm_free(st->path);
    cllm_free(st);
}

cllm_buffer *cllm_stream_buffer(const cllm_stream *st) { return st->buf; }

cllm_status cllm_stream_check(const cllm_stream *st) {
    cllm_stream *m = (cllm_stream *)st;
    pthread_mutex_lock(&m->mu);
    char err[512];
    const bool failed = m->read_failed;
    if (failed) snprintf(err, sizeof(err), "%s", m->read_err);
    pthread_mutex_unlock(&m->mu);
    if (!failed) return CLLM_OK;
    return cllm_error(CLLM_ERR_IO, "%s; requests fail until the file is restored", err);
}
bool cllm_stream_direct_io(const cllm_stream *st) {
    cllm_stream *m = (cllm_stream *)st;
    pthread_mutex_lock(&m->mu);
    const bool direct = m->direct_seen;
    pthread_mutex_unlock(&m->mu);
    return direct;
}

void cllm_stream_stats(const cllm_stream *st, uint64_t *bytes_read, uint64_t *bytes_cached,
                       double *wait_s) {
    cllm_stream *m = (cllm_stream *)st;
    pthread_mutex_lock(&m->mu);
    if (bytes_read) *bytes_read = m->bytes_read;
    if (bytes_cached) *bytes_cached = m->bytes_cached;
    if (wait_s) *wait_s = m->wait_s;
    pthread_mutex_unlock(&m->mu);
}

uint64_t cllm_stream_passes(const cllm_stream *st) {
    cllm_stream *m = (cllm_stream *)st;
    pthread_mutex_lock(&m->mu);
    const uint64_t n = m->passes;
    pthread_mutex_unlock(&m->mu);
    return n;
}

double cllm_stream_read_seconds(const cllm_stream *st) {
    cllm_stream *m = (cllm_stream *)st;
    pthread_mutex_lock(&m->mu);
    const double t = m->read_s;
    pthread_mutex_unlock(&m->mu);
    return t;
}

/* The gate callback: wait for streamed layer j, or release its slot. */
static cllm_status gate(void *user, int j, bool after) {
    cllm_stream *st = user;
    const cllm_stream_layout *lay = st->lay;
    const int s = j % lay->n_slots;
    pthread_mutex_lock(&st->mu);
    if (after) {
        if (!st->keep_all) st->slot_layer[s] = -1;
        st->n_released++;
        pthread_cond_broadcast(&st->cv);
        pthread_mutex_unlock(&st->mu);
        return CLLM_OK;
    }
    const double t0 = now_s();
    while (st->slot_layer[s] != j) pthread_cond_wait(&st->cv, &st->mu);
    st->wait_s += now_s() - t0;
    if (st->slot_failed[s]) {
        char err[256];
        snprintf(err, sizeof(err), "%s", st->slot_err[s]);
        st->read_failed = true;
        snprintf(st->read_err, sizeof(st->read_err), "%s: reading streamed layer %d: %s", st->path,
                 lay->layers[j].layer, err);
        pthread_mutex_unlock(&st->mu);
        return cllm_error(CLLM_ERR_IO, "%s: reading streamed layer %d: %s", st->path,
                          lay->layers[j].layer, err);
    }
    pthread_mutex_unlock(&st->mu);
    return CLLM_OK;
}

static int layer_of(const cllm_stream *st, const cllm_tensor *t) {
    while (t->view_src) t = t->view_src;
    size_t lo = 0, hi = (size_t)st->n_tl;
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if ((uintptr_t)st->tl[mid].t < (uintptr_t)t) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo < (size_t)st->n_tl && st->tl[lo].t == t ? st->tl[lo].j : -1;
}

cllm_status cllm_stream_begin(cllm_stream *st, cllm_sched *sched, const cllm_graph *g) {
    const int n = st->lay->n_layers;
    pthread_mutex_lock(&st->pass_mu);
    if (!st->first || st->cap_gates < 2 * n) {
        cllm_free(st->gates);
        cllm_free(st->evs);
        cllm_free(st->first);
        cllm_free(st->last);
        st->gates = cllm_malloc((size_t)(2 * n) * sizeof(*st->gates));
        st->evs = cllm_malloc((size_t)(2 * n) * sizeof(*st->evs));
        st->first = cllm_malloc((size_t)n * sizeof(int));
        st->last = cllm_malloc((size_t)n * sizeof(int));
        st->cap_gates = 2 * n;
        if (!st->gates || !st->evs || !st->first || !st->last) {
            cllm_free(st->gates);
            cllm_free(st->evs);
            cllm_free(st->first);
            cllm_free(st->last);
            st->gates = NULL;
            st->evs = NULL;
            st->first = st->last = NULL;
            st->cap_gates = 0;
            pthread_mutex_unlock(&st->pass_mu);
            return cllm_error(CLLM_ERR_NOMEM, "stream: out of host memory");
        }
    }
    for (int j = 0; j < n; j++) st->first[j] = st->last[j] = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const cllm_tensor *t = g->nodes[i];
        if (cllm_op_is_view(t->op)) continue;
        for (int k = 0; k < CLLM_MAX_SRC; k++) {
            if (!t->src[k]) continue;
            const int j = layer_of(st, t->src[k]);
            if (j < 0) continue;
            if (st->first[j] < 0) st->first[j] = i;
            st->last[j] = i;
        }
    }
    /* every streamed layer read, in order, each done before the one that
     * takes its slot next starts: else the ring could not serve the graph */
    for (int j = 0; j < n; j++) {
        const int jn = j + st->lay->n_slots;
        if (st->first[j] < 0 || (j > 0 && st->first[j] < st->first[j - 1]) ||
            (jn < n && !st->keep_all && st->last[j] >= st->first[jn])) {
            pthread_mutex_unlock(&st->pass_mu);
            return cllm_error(CLLM_ERR_UNSUPPORTED,
                              "stream: the graph does not read the streamed layers one after "
                              "another (layer %d)",
                              st->lay->layers[j].layer);
        }
    }
    for (int j = 0; j < n; j++) {
        st->evs[2 * j] = (gate_ev){st->first[j], false, j};
        st->evs[2 * j + 1] = (gate_ev){st->last[j], true, j};
    }
    qsort(st->evs, (size_t)(2 * n), sizeof(*st->evs), ev_cmp);
    for (int e = 0; e < 2 * n; e++) {
        st->gates[e] = (cllm_sched_gate){
            .node = g->nodes[st->evs[e].node], .id = st->evs[e].j, .after = st->evs[e].after};
    }
    st->n_released = 0;
    pthread_mutex_lock(&st->mu);
    if (st->paused) {
        st->paused = false;
        pthread_cond_broadcast(&st->cv);
    }
    pthread_mutex_unlock(&st->mu);
    cllm_sched_set_gates(sched, st->gates, 2 * n, gate, st);
    return CLLM_OK;
}

void cllm_stream_end(cllm_stream *st, cllm_sched *sched, bool ok) {
    cllm_sched_set_gates(sched, NULL, 0, NULL, NULL);
    pthread_mutex_lock(&st->mu);
    if (!ok || st->n_released != st->lay->n_layers) reset_locked(st);
    if (ok) st->read_failed = false;
    if (ok && st->n_released == st->lay->n_layers) st->passes++;
    pthread_mutex_unlock(&st->mu);
    pthread_mutex_unlock(&st->pass_mu);
}

int cllm_stream_read_direct(int fd, void *bounce, size_t bounce_size, uint64_t off, size_t size,
                            void *dst) {
    const uint64_t end = off + size;
    uint64_t at = off / CLLM_STREAM_BLOCK * CLLM_STREAM_BLOCK;
    while (at < end) {
        const size_t want =
            CLLM_MIN(bounce_size, cllm_align_up((size_t)(end - at), CLLM_STREAM_BLOCK));
        const ssize_t n = pread(fd, bounce, want, (off_t)at);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno;
        if (n == 0) return EIO; /* the end of the file before the data's */
        const uint64_t from = CLLM_MAX(at, off), to = CLLM_MIN(at + (uint64_t)n, end);
        if (to > from) memcpy((char *)dst + (from - off), (char *)bounce + (from - at), to - from);
        at += (uint64_t)n;
        if ((size_t)n % CLLM_STREAM_BLOCK && at < end) return EIO;
    }
    return 0;
}

/* ---- read bandwidth ------------------------------------------------------ */

cllm_status cllm_stream_probe_read(const char *path, size_t max_bytes, size_t chunk,
                                   int queue_depth, size_t piece, bool buffered,
                                   double *bytes_per_s, bool *direct) {
    const size_t CHUNK = cllm_align_up(CLLM_MAX(CLLM_MIN(chunk, (size_t)64 << 20), (size_t)1 << 20),
                                       CLLM_STREAM_BLOCK);
    piece = reads_piece(piece);
    int fd = buffered ? -1 : open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    bool dio = fd >= 0;
    if (fd < 0) fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cllm_error(CLLM_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return cllm_error(CLLM_ERR_IO, "%s: %s", path, strerror(errno));
    }
    const uint64_t size = (uint64_t)sb.st_size / CLLM_STREAM_BLOCK * CLLM_STREAM_BLOCK;
    void *buf = cllm_aligned_alloc(CLLM_STREAM_BLOCK, CHUNK);
    rd_piece *pieces = cllm_malloc((size_t)n_pieces(CHUNK, piece) * sizeof(*pieces));
    if (!buf || !pieces) {
        close(fd);
        cllm_free(buf);
        cllm_free(pieces);
        return cllm_error(CLLM_ERR_NOMEM, "stream: out of host memory");
    }
    rd_pool pool;
    pool_start(&pool, reads_qd(queue_depth));
    const uint64_t n_chunks = CLLM_MAX(size / CHUNK, 1);
    const uint64_t want = CLLM_MAX(CLLM_MIN((uint64_t)max_bytes / CHUNK, n_chunks), 1);
    uint64_t total = 0;
    cllm_status rc = CLLM_OK;
    if (!dio)
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED),
            posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    const double t0 = now_s();
    for (uint64_t c = 0; c < want && rc == CLLM_OK; c++) {
        /* chunks spread over the file, each read in pieces as a slot is */
        const uint64_t off = (n_chunks / want) * c * CHUNK;
        const size_t len = (size_t)CLLM_MIN((uint64_t)CHUNK, size > off ? size - off : 0);
        if (!len) break;
        /* buffered, as the stream reads: one reader, whole chunks */
        const bool serial = !dio && queue_depth <= 0;
        const int n = split_pieces(pieces, off, len, len, buf, serial ? len : piece);
        if (serial) {
            for (int i = 0; i < n; i++) read_piece(fd, false, -1, &pieces[i]);
        } else {
            pool_run(&pool, fd, dio, -1, pieces, n);
        }
        for (int i = 0; i < n; i++) {
            if (pieces[i].err == EINVAL && dio) {
                /* direct I/O refused: buffered from here, this chunk again */
                close(fd);
                fd = open(path, O_RDONLY | O_CLOEXEC);
                dio = false;
                if (fd < 0) {
                    rc = cllm_error(CLLM_ERR_IO, "%s: %s", path, strerror(errno));
                    break;
                }
                posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
                posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
                c--;
                break;
            }
            if (pieces[i].err || pieces[i].got < pieces[i].need) {
                rc = cllm_error(CLLM_ERR_IO, "%s: read-bandwidth probe: %s", path,
                                pieces[i].err ? strerror(pieces[i].err) : "unexpected end of file");
                break;
            }
            total += pieces[i].got;
        }
    }
    const double dt = now_s() - t0;
    pool_stop(&pool);
    if (!dio && fd >= 0) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (fd >= 0) close(fd);
    cllm_free(buf);
    cllm_free(pieces);
    if (rc != CLLM_OK) return rc;
    *bytes_per_s = dt > 0 ? (double)total / dt : 0;
    if (direct) *direct = dio;
    return CLLM_OK;
}

cllm_status cllm_stream_probe_read_bw(const char *path, size_t max_bytes, size_t chunk,
                                      double *bytes_per_s, bool *direct) {
    return cllm_stream_probe_read(path, max_bytes, chunk, 0, 0, false, bytes_per_s, direct);
}
