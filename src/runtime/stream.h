/*
 * Streamed layers: weights that do not fit a device's budget are read from
 * the file, layer by layer, into a ring of slot buffers while the layers
 * before them compute.
 *
 *     cllm_stream_layout lay;
 *     st = cllm_stream_layout_init(&lay, g, w, &pl, 2);   // pl.streamed marks the layers
 *     ... a buffer of lay.ring_bytes (measure mode, or cllm_stream_new's) ...
 *     cllm_stream_place(&lay, w, ring_buf);              // streamed tensors point into it
 *     cllm_stream *st;
 *     st = cllm_stream_new("model.gguf", cpu, w, &lay, &st); // places, reads ahead
 *     ... per forward pass, around cllm_sched_graph_compute:
 *     cllm_stream_begin(st, sched, graph); compute; cllm_stream_end(st, sched, ok);
 *     cllm_stream_free(st);
 *     cllm_stream_layout_free(&lay);
 *
 * Slots. Streamed layer j (the j-th streamed layer in model order) always
 * lives in slot j % n_slots, so its tensors keep one address for the life of
 * the model and a graph built once runs again unchanged. A slot is as large
 * as the largest streamed layer: the layer's streamed tensors (all of them,
 * or the ones that pl->keep does not keep resident), grouped into runs of
 * adjacent file bytes, each run read as whole 4 KiB blocks (direct I/O needs
 * block-aligned offsets, lengths and addresses). The gates follow the
 * streamed tensors only: a layer's resident ones are read as any others.
 *
 * Order. The I/O thread reads streamed layers 0, 1, .., n-1, 0, 1, .. into
 * their slots, each one as soon as the slot's previous layer has been
 * released. The executor waits before the first node that reads a streamed
 * layer (cllm_sched_set_gates) and releases the slot after its last node, so
 * that layer j + n_slots is read while layers j .. j + n_slots - 1 compute.
 * With no more streamed layers than slots every layer is read once and kept.
 *
 * Layout. The device of the ring chooses a layout for each streamed weight
 * once (cllm_device_init_weight, as for resident ones), and the I/O thread
 * converts a layer's weights after reading them, before it hands the slot
 * to the executor (cllm_device_convert_weight): a streamed layer holds the
 * same bytes as a resident one, so a pass computes the same numbers.
 *
 * Reading. With O_DIRECT where the file system takes it (no page cache at
 * all); else pread() followed by posix_fadvise(DONTNEED), which drops the
 * pages read from the cache (the file opened with POSIX_FADV_SEQUENTIAL, so
 * the kernel's readahead runs ahead of the reads, each run read whole by
 * the I/O thread). With direct I/O a layer's runs are split into pieces
 * (CLLM_STREAM_PIECE bytes) that a pool of readers reads at once
 * (CLLM_STREAM_QD in flight: the I/O thread and QD - 1 others). On the one
 * machine measured (a virtual disk, bench/results/2026-12-07-zen3-reads.md)
 * 4 MiB pieces at 8 in flight gave the I/O thread 1.10x the rate of whole
 * runs with the CPUs less loaded, 0.93x with them loaded far beyond their
 * count: the kernel already splits one large direct read into requests in
 * flight together, so the gain is small there. A read error or a file that
 * is now shorter is returned from the wait as CLLM_ERR_IO naming the layer;
 * the pass stops, cllm_stream_end(st, false) resets the ring, and the next pass opens the path
 * again and reads from layer 0 (so a restored file works again, whether written back in place or
 * renamed over the path). The bytes of each layer are summed at its first read and every later read
 * must give the same sum: a file overwritten in place fails the same way, never computes with other
 * weights.
 *
 * Thread safety: one pass at a time; cllm_stream_begin takes a lock that
 * cllm_stream_end releases, so sessions of one model take turns.
 */
#ifndef CLLM_RUNTIME_STREAM_H
#define CLLM_RUNTIME_STREAM_H

#include "gguf/gguf.h"
#include "model/arch.h"
#include "runtime/place.h"
#include "sched/sched.h"

#define CLLM_STREAM_BLOCK     ((size_t)4096) /* alignment of direct I/O */
#define CLLM_STREAM_MAX_SLOTS 64
#define CLLM_STREAM_MAX_QD    32 /* reads in flight at most */
/* The defaults of the reads (bench_read's figures, bench/results): reads
 * in flight, and bytes per read. */
#define CLLM_STREAM_QD    8
#define CLLM_STREAM_PIECE ((size_t)4 << 20)

/* A run of file bytes read with one call into a slot. */
typedef struct cllm_stream_run {
    uint64_t file_off; /* absolute, a multiple of CLLM_STREAM_BLOCK */
    size_t len;        /* a multiple of CLLM_STREAM_BLOCK (may reach past the end of the file) */
    size_t slot_off;   /* where it goes in the slot, a multiple of CLLM_STREAM_BLOCK */
    uint64_t need_end; /* the run's last tensor byte + 1 (absolute): a read short of it fails */
} cllm_stream_run;

typedef struct cllm_stream_layer {
    int layer; /* index in the model */
    int first_run, n_runs;
    size_t bytes; /* tensor bytes (the part a pass needs) */
} cllm_stream_layer;

typedef struct cllm_stream_layout {
    int n_layers; /* streamed layers, in model order */
    cllm_stream_layer *layers;
    int n_runs;
    cllm_stream_run *runs;
    int n_slots;
    size_t slot_bytes; /* a multiple of CLLM_STREAM_BLOCK */
    size_t ring_bytes; /* n_slots * slot_bytes */
    size_t read_bytes; /* bytes read per pass (runs of every streamed layer) */
    size_t tensor_bytes;
    /* per weight tensor of w (creation order): its streamed layer (index into
     * layers) and its offset in that layer's slot; -1 if resident */
    int n_weights;
    int *weight_layer;
    size_t *weight_off;
} cllm_stream_layout;

/* Lays out the layers that pl->streamed marks (none: an empty layout) for
 * a ring of n_slots (2 .. CLLM_STREAM_MAX_SLOTS; fewer when fewer layers
 * are streamed). CLLM_ERR_NOMEM, or CLLM_ERR_INVALID_ARG for a bad slot
 * count. */
cllm_status cllm_stream_layout_init(cllm_stream_layout *lay, const cllm_gguf *g,
                                    const cllm_weights *w, const cllm_placement *pl, int n_slots);
void cllm_stream_layout_free(cllm_stream_layout *lay);

/* Places every streamed tensor of w at its fixed address in `ring` (a
 * measure-mode or real buffer of at least lay->ring_bytes). */
void cllm_stream_place(const cllm_stream_layout *lay, const cllm_weights *w, cllm_buffer *ring);

/* ---- the running ring ---------------------------------------------------- */

typedef struct cllm_stream cllm_stream;

/*
 * Allocates the ring (lay->ring_bytes of host memory, block-aligned) as a
 * buffer of device `dev` (cllm_device_buffer_from_host_ptr, counted as
 * CLLM_MEM_WEIGHTS), places the streamed tensors of w in it
 * (cllm_stream_place) with the layouts `dev` chooses for them, opens `path`
 * for reading (direct I/O when it can) and starts the I/O thread, which
 * begins reading the first layers. `lay` and `w` must outlive the stream.
 * CLLM_ERR_UNSUPPORTED when `dev` cannot compute from host memory. On
 * failure *out is untouched and nothing stays allocated.
 */
cllm_status cllm_stream_new(const char *path, cllm_device *dev, const cllm_weights *w,
                            const cllm_stream_layout *lay, cllm_stream **out);
/* Stops the I/O thread, closes the file, frees the ring. NULL does nothing. */
void cllm_stream_free(cllm_stream *st);

cllm_buffer *cllm_stream_buffer(const cllm_stream *st);
bool cllm_stream_direct_io(const cllm_stream *st);

/*
 * Starts a pass over graph g (scheduled in `sched`, not yet computed): sets
 * the scheduler's gates so that each node reading a streamed layer waits for
 * it and the slot is released after its last reader. Takes the stream's
 * pass lock (released by cllm_stream_end). CLLM_ERR_NOMEM.
 */
/* CLLM_OK, or CLLM_ERR_IO with its message when the last pass failed on a
 * read (until a pass succeeds). Thread-safe. */
cllm_status cllm_stream_check(const cllm_stream *st);

cllm_status cllm_stream_begin(cllm_stream *st, cllm_sched *sched, const cllm_graph *g);
/* Ends the pass: clears the gates; with ok false (the compute failed or
 * stopped halfway) the ring is reset and the next pass reads from layer 0. */
void cllm_stream_end(cllm_stream *st, cllm_sched *sched, bool ok);

/* Totals since the stream was made: bytes read from the file, those of
 * them copied from the page cache, and seconds the executor waited for a
 * layer. */
void cllm_stream_stats(const cllm_stream *st, uint64_t *bytes_read, uint64_t *bytes_cached,
                       double *wait_s);
/* Forward passes that read every streamed layer and ended well, since the
 * stream was made: one per pass whatever the number of tokens (columns)
 * in it. Thread-safe. */
uint64_t cllm_stream_passes(const cllm_stream *st);
/* Seconds the I/O thread spent reading (bytes_read over it: the rate its
 * reads achieved, waits for a free slot left out). Thread-safe. */
double cllm_stream_read_seconds(const cllm_stream *st);

/*
 * Reads `size` bytes at file offset `off` of `fd` (opened with O_DIRECT)
 * into dst through `bounce` (block-aligned, bounce_size a multiple of
 * CLLM_STREAM_BLOCK): no page cache is used. 0, or an errno (EIO for an
 * end of file before the data's end).
 */
int cllm_stream_read_direct(int fd, void *bounce, size_t bounce_size, uint64_t off, size_t size,
                            void *dst);

/*
 * Measures the read bandwidth of `path` (bytes/s) as the I/O thread reads:
 * up to `max_bytes` read with direct I/O in chunks of `chunk` bytes (what a
 * slot takes: 1 .. 64 MiB) spread over the file, each split into the
 * stream's pieces read by its number of readers (pread +
 * posix_fadvise(DONTNEED) where direct I/O is refused, after dropping the
 * file from the cache). CLLM_ERR_IO with the reason.
 */
cllm_status cllm_stream_probe_read_bw(const char *path, size_t max_bytes, size_t chunk,
                                      double *bytes_per_s, bool *direct);
/* The same with the reads in flight and the piece size given (0: those of
 * the stream), and buffered reads (the page cache, with readahead) when
 * `buffered` (queue_depth 0: as the stream reads buffered, one reader and
 * whole chunks): for benchmarks. */
cllm_status cllm_stream_probe_read(const char *path, size_t max_bytes, size_t chunk,
                                   int queue_depth, size_t piece, bool buffered,
                                   double *bytes_per_s, bool *direct);

/* The reads in flight (1 .. CLLM_STREAM_MAX_QD) and bytes per read (a
 * multiple of CLLM_STREAM_BLOCK) of streams and probes started from now on,
 * process-wide; 0 for the defaults (CLLM_STREAM_QD, CLLM_STREAM_PIECE). For
 * tests and benchmarks; call it before loading. */
void cllm_stream_reads_set(int queue_depth, size_t piece);

#endif /* CLLM_RUNTIME_STREAM_H */
