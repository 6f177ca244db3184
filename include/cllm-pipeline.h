/*
 * cllm-pipeline: one model across several hosts, its layers in contiguous
 * ranges (stages), one stage per MPI rank. Rank 0 holds the token
 * embeddings and the first layers, tokenizes, samples and prints; each rank
 * computes its layers and sends the activations of the batch to the next;
 * the last rank computes the logits and sends them back to rank 0.
 *
 * Rank 0 holds one session of fp->n_sessions sequences, which a program
 * uses as a local session of that many sequences (cllm.h): decode,
 * decode_seqs, seq_logits, seq_n_past, seq_truncate, memory. Each rank's
 * session holds its layers' KV cache of every sequence.
 *
 *     // every rank (under mpirun -np N):
 *     cllm_plan_params fp = cllm_plan_default_params();   // shape, budgets per rank
 *     fp.n_sessions = 4;                                   // sequences
 *     cllm_pipe_opts po = cllm_pipe_default_opts();
 *     cllm_pipe *p;
 *     if (cllm_pipe_init(&argc, &argv) != CLLM_OK) ...
 *     if (cllm_pipe_open("model.gguf", &fp, &po, &p) != CLLM_OK) ...
 *     if (cllm_pipe_rank(p) == 0) {
 *         cllm_session *s = cllm_pipe_session(p);   // as on one machine
 *         st = cllm_session_decode(s, prompt, n_prompt);          // sequence 0
 *         cllm_seq_tokens step[4] = {{0, &t0, 1}, {1, &t1, 1}, {2, &t2, 1}, {3, &t3, 1}};
 *         st = cllm_session_decode_seqs(s, step, 4);  // the ranks work on
 *         ... cllm_session_seq_logits(s, 2) ...       // different sequences at once
 *     } else {
 *         st = cllm_pipe_serve(p);                  // until rank 0 closes
 *     }
 *     cllm_pipe_close(p);                           // rank 0: stops the others
 *     cllm_pipe_free(p);
 *     cllm_pipe_finalize(st != CLLM_OK);
 *
 * On rank 0, cllm_session_decode sends its prompt's micro-batches (n_batch
 * tokens) down the ranks one after the other, computing the next while the
 * last one travels; cllm_session_decode_seqs computes and sends each item
 * (a sequence's tokens) as a batch of its own before it collects the
 * logits of all of them, so that the ranks work on different sequences at
 * the same time. Each item's logits are those it gets alone; a local
 * session's batch gives the same bit for bit in the cases cllm.h names
 * (items of one token, of at least 8 tokens, or the one-token items first).
 * A truncation needs no message: every batch carries its sequence's
 * position, and the other ranks go back to it.
 *
 * The plan of the ranks (cllm_pipe_plan) needs no MPI: `cllm plan --ranks N`
 * prints it on one machine. The transport (cllm_pipe_init and the rest) is
 * there only when cllm was built with MPI (cllm_pipe_have_mpi()); without
 * it those functions return CLLM_ERR_UNSUPPORTED.
 *
 * This library (libcllm-pipeline) sits beside libcllm and is not installed
 * with it; the `cllm` command links it.
 */
#ifndef CLLM_PIPELINE_H
#define CLLM_PIPELINE_H

#include "cllm.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CLLM_PIPE_MAX_RANKS 64
#define CLLM_PIPE_MAX_SEQS  64 /* concurrent sequences (fp->n_sessions) */

/* ---- the plan of the ranks (no MPI) ------------------------------------ */

typedef struct cllm_pipe_rank_plan {
    int layer_begin, layer_end;   /* its layers: [begin, end) */
    bool has_input, has_output;   /* token embeddings / output layer */
    size_t bytes[CLLM_MEM_COUNT]; /* its CPU: weights, state, compute, workspace */
    /* the host buffers of the exchange: the activations received and sent
     * (two in flight), the logits sent (last rank) or received (rank 0) */
    size_t exchange;
    size_t total, budget; /* budget 0: none given */
} cllm_pipe_rank_plan;

typedef struct cllm_pipe_plan {
    int n_ranks;
    int64_t n_layer, n_embd, n_vocab, n_ctx, n_batch;
    int n_seq; /* concurrent sequences: those of each rank's session */
    /* bytes one batch of n tokens sends between two ranks: act_header +
     * n x act_row; the last rank sends n_outputs x logits_row to rank 0 */
    size_t act_header, act_row, logits_row;
    cllm_pipe_rank_plan ranks[CLLM_PIPE_MAX_RANKS];
} cllm_pipe_plan;

/*
 * Plans `n_ranks` stages of the model at `path` (metadata only, no weight
 * read): layers split in contiguous ranges of equal size (the first ranks
 * take one more when they do not divide), each rank's part measured on its
 * CPU exactly as a session of the shape of `fp` (n_ctx, n_batch, type_k, type_v,
 * n_threads; fp->use_mmap is ignored: a rank reads only its own tensors into
 * memory, since a file's tensors need not lie in layer order), plus the
 * exchange buffers. fp's budget "cpu" (cllm_plan_add_budget)
 * applies to every rank; fp->n_sessions concurrent sequences (at most
 * CLLM_PIPE_MAX_SEQS) make each rank's session one of that many sequences,
 * measured as such (a KV cache per sequence, the compute of their worst
 * batches).
 * CLLM_ERR_TOO_LARGE names the rank that is short and
 * by how much (*out is still filled); CLLM_ERR_INVALID_ARG for more ranks
 * than layers; CLLM_ERR_UNSUPPORTED for an architecture that cannot run a
 * range of its layers.
 */
cllm_status cllm_pipe_plan_file(const char *path, const cllm_plan_params *fp, int n_ranks,
                                cllm_pipe_plan *out);

/* Prints the plan: a row per rank, then the bytes exchanged per token. */
void cllm_pipe_plan_print(const cllm_pipe_plan *plan, FILE *f);

/* ---- the pipeline over MPI ---------------------------------------------- */

/* Whether this build has MPI. */
bool cllm_pipe_have_mpi(void);

/* Whether this process was started by mpirun (or another MPI launcher) with
 * more than one rank: the environment says so; MPI is not touched. */
bool cllm_pipe_launched(void);

/* Starts MPI (once per process); errors on the world communicator are
 * returned, not fatal. It asks for MPI_THREAD_SERIALIZED, so that a thread
 * other than the one that started MPI may drive the pipeline (one at a
 * time: a server's engine thread); cllm_pipe_any_thread() says whether the
 * MPI library granted it. */
cllm_status cllm_pipe_init(int *argc, char ***argv);
bool cllm_pipe_any_thread(void);

/* Ends MPI: MPI_Finalize, or after a failure MPI_Abort, so that no rank
 * waits for one that has given up (the process then exits non-zero). */
void cllm_pipe_finalize(bool failed);

typedef struct cllm_pipe_opts {
    double timeout_s; /* a wait for another rank gives up after this; default 120 */
    /* ranks > 0 waiting for the next batch from the rank before them: no
     * limit (a server's ranks are idle between requests; rank 0 still gives
     * up after timeout_s when a batch does not come back) */
    bool idle_forever;
    bool quiet; /* no per-rank report on standard error */
} cllm_pipe_opts;

cllm_pipe_opts cllm_pipe_default_opts(void);

typedef struct cllm_pipe cllm_pipe;

/*
 * Every rank: plans the ranks (cllm_pipe_plan_file, the same on each),
 * refuses a plan that does not fit (rank 0 reports which rank is short),
 * loads this rank's layers and makes its session (the shape of fp).
 * Collective: every rank calls it. On failure *out is untouched.
 */
cllm_status cllm_pipe_open(const char *path, const cllm_plan_params *fp, const cllm_pipe_opts *opts,
                           cllm_pipe **out);

int cllm_pipe_rank(const cllm_pipe *p);
int cllm_pipe_size(const cllm_pipe *p);
const cllm_pipe_plan *cllm_pipe_get_plan(const cllm_pipe *p);

/* This rank's model and session (owned by p). On rank 0 the session (of
 * cllm_pipe_n_seq sequences) decodes tokens as a local one; the model has
 * the tokenizer. */
cllm_model *cllm_pipe_model(cllm_pipe *p);
cllm_session *cllm_pipe_session(cllm_pipe *p);

/* The sequences of the session (fp->n_sessions). */
int cllm_pipe_n_seq(const cllm_pipe *p);

/* Ranks > 0: computes what arrives until rank 0 closes the pipeline.
 * CLLM_ERR_IO for a failed transfer or a wait past the timeout. */
cllm_status cllm_pipe_serve(cllm_pipe *p);

/* Rank 0: tells the other ranks to stop (they leave cllm_pipe_serve). */
cllm_status cllm_pipe_close(cllm_pipe *p);

/* Seconds this rank spent waiting for transfers, and bytes it sent. */
double cllm_pipe_comm_seconds(const cllm_pipe *p);
uint64_t cllm_pipe_bytes_sent(const cllm_pipe *p);

typedef struct cllm_pipe_stats {
    double comm_s[CLLM_PIPE_MAX_RANKS]; /* per rank: waiting for transfers */
    uint64_t bytes_sent[CLLM_PIPE_MAX_RANKS];
    uint64_t batches[CLLM_PIPE_MAX_RANKS]; /* computed (rank 0: sent) */
} cllm_pipe_stats;

/* Collective, after cllm_pipe_close (rank 0) and cllm_pipe_serve (the
 * others): every rank's figures, into *out on rank 0. */
cllm_status cllm_pipe_gather_stats(cllm_pipe *p, cllm_pipe_stats *out);

/* Collective, after the pipeline is closed: the one-way time of a message
 * of `bytes` between ranks 0 and 1 (ping-pong, `reps` round trips, after
 * one not counted), into *one_way_s on rank 0 (0 with one rank). */
cllm_status cllm_pipe_measure_transfer(cllm_pipe *p, size_t bytes, int reps, double *one_way_s);

void cllm_pipe_free(cllm_pipe *p);

#ifdef __cplusplus
}
#endif

#endif /* CLLM_PIPELINE_H */
