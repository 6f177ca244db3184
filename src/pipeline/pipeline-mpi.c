/*
 * The transport of a pipeline across hosts (cllm-pipeline.h) over MPI.
 *
 * Messages (MPI_COMM_WORLD):
 *   TAG_BATCH  rank r -> r + 1: a header (op, n_past, n_tokens, n_outputs,
 *              want) and the activations of the batch, [n_tokens][n_embd]
 *              f32; op STOP ends the pipeline (passed on to the end).
 *   TAG_LOGITS last rank -> 0: the logits of a batch sent with `want`,
 *              [n_outputs][n_vocab] f32.
 *   TAG_ERROR  any rank -> 0: why it gave up (text).
 *
 * Rank 0 sends with MPI_Isend from two buffers in turn, so it computes the
 * next micro-batch (a session batch of n_batch tokens) while the last one
 * travels and the next rank computes it. Every wait polls with MPI_Test
 * against a deadline (opts.timeout_s), and MPI errors are returned
 * (MPI_ERRORS_RETURN): a rank that stops answering or a failed transfer is
 * an error that rank 0 reports, never a hang.
 */
#include "core/hostmem.h"
#include "runtime/model.h"
#include "pipeline/pipeline-impl.h"
#include "runtime/session.h"

#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { TAG_BATCH = 101, TAG_LOGITS = 102, TAG_ERROR = 103 };
enum { OP_BATCH = 1, OP_STOP = 2 };
enum { ERR_TEXT = 512 };

struct cllm_pipe {
    int rank, size;
    cllm_pipe_opts o;
    cllm_pipe_plan plan;
    cllm_model *m;
    int n_seq;       /* concurrent sequences: those of s */
    cllm_session *s; /* this rank's layers, n_seq sequences */
    /* rank 0: the logits asked for since the link's last wait, received in
     * the order of the batches sent */
    MPI_Request pending[CLLM_PIPE_MAX_SEQS];
    int n_pending;
    size_t msg_bytes;
    char *recv_msg;    /* ranks > 0 */
    char *send_msg[2]; /* all but the last */
    MPI_Request send_req[2];
    int next_slot;
    float *logits_out; /* the last rank */
    double comm_s;     /* waiting for transfers */
    uint64_t bytes_sent;
    uint64_t n_batches; /* batches this rank computed (ranks > 0) */
    size_t exchange;    /* bytes of the exchange buffers allocated */
    /* tests: stall or fail at this rank's batch n (CLLM_PIPE_FAULT) */
    int fault_batch;
    char fault_kind[16];
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static cllm_status mpi_error(int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof(msg), "code %d", rc);
    return cllm_error(CLLM_ERR_IO, "pipeline: %s: %s", what, msg);
}

bool cllm_pipe_have_mpi(void) { return true; }

/* MPI_THREAD_SERIALIZED was granted (cllm_pipe_init) */
static bool g_any_thread;

bool cllm_pipe_any_thread(void) { return g_any_thread; }

bool cllm_pipe_launched(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 1) return true;
    }
    return false;
}

cllm_status cllm_pipe_init(int *argc, char ***argv) {
    int done = 0;
    MPI_Initialized(&done);
    if (done) return CLLM_OK;
    int provided = 0;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) return cllm_error(CLLM_ERR_IO, "pipeline: MPI_Init failed (%d)", rc);
    g_any_thread = provided >= MPI_THREAD_SERIALIZED;
    rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Comm_set_errhandler");
    return CLLM_OK;
}

void cllm_pipe_finalize(bool failed) {
    int done = 0;
    MPI_Initialized(&done);
    if (!done) return;
    if (failed) {
        /* every rank goes: none waits for one that has given up */
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
}

cllm_pipe_opts cllm_pipe_default_opts(void) {
    return (cllm_pipe_opts){.timeout_s = 120.0, .idle_forever = false, .quiet = false};
}

/* Waits for req until the deadline, polling (a short sleep between polls,
 * so that ranks sharing cores leave them to the ones computing). Rank 0
 * also watches for another rank's error report. */
static cllm_status wait_req_for(cllm_pipe *p, MPI_Request *req, const char *what, int peer,
                                double timeout_s) {
    const double t0 = now_s();
    for (long i = 0;; i++) {
        int flag = 0;
        const int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            p->comm_s += now_s() - t0;
            char w[128];
            snprintf(w, sizeof(w), "%s rank %d", what, peer);
            return mpi_error(rc, w);
        }
        if (flag) break;
        if (p->rank == 0 && i % 64 == 0) {
            int err = 0;
            MPI_Status st;
            if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_ERROR, MPI_COMM_WORLD, &err, &st) == MPI_SUCCESS &&
                err) {
                char text[ERR_TEXT] = {0};
                MPI_Recv(text, ERR_TEXT - 1, MPI_CHAR, st.MPI_SOURCE, TAG_ERROR, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
                p->comm_s += now_s() - t0;
                return cllm_error(CLLM_ERR_IO, "pipeline: rank %d failed: %s", st.MPI_SOURCE, text);
            }
        }
        const double waited = now_s() - t0;
        if (timeout_s > 0 && waited > timeout_s) {
            p->comm_s += waited;
            /* the request stays posted: the pipeline is given up */
            return cllm_error(CLLM_ERR_IO,
                              "pipeline: rank %d: nothing %s rank %d within %.0f s (it stopped, "
                              "stalls, or a rank before it does)",
                              p->rank, what, peer, timeout_s);
        }
        if (i > 256) {
            /* 50 us; 2 ms once idle for a second (a server between requests) */
            const struct timespec ts = {0, waited > 1.0 ? 2000 * 1000 : 50 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    p->comm_s += now_s() - t0;
    return CLLM_OK;
}

static cllm_status wait_req(cllm_pipe *p, MPI_Request *req, const char *what, int peer) {
    return wait_req_for(p, req, what, peer, p->o.timeout_s);
}

/* Sends a batch message from slot buffer `slot` (header filled here). */
static cllm_status send_batch(cllm_pipe *p, int slot, const int64_t h[8], int64_t n) {
    memcpy(p->send_msg[slot], h, CLLM_PIPE_HEADER_BYTES);
    const size_t bytes = CLLM_PIPE_HEADER_BYTES + (size_t)n * p->plan.act_row;
    const int rc = MPI_Isend(p->send_msg[slot], (int)bytes, MPI_BYTE, p->rank + 1, TAG_BATCH,
                             MPI_COMM_WORLD, &p->send_req[slot]);
    if (rc != MPI_SUCCESS) {
        char w[64];
        snprintf(w, sizeof(w), "sending a batch to rank %d", p->rank + 1);
        return mpi_error(rc, w);
    }
    p->bytes_sent += bytes;
    return CLLM_OK;
}

/* The free slot for the next message to the next rank: its last send done. */
static cllm_status take_slot(cllm_pipe *p, int *slot) {
    const int s = p->next_slot;
    if (p->send_req[s] != MPI_REQUEST_NULL) {
        CLLM_TRY(wait_req(p, &p->send_req[s], "taken by", p->rank + 1));
    }
    p->next_slot ^= 1;
    *slot = s;
    return CLLM_OK;
}

/* ---- rank 0: the session link ------------------------------------------- */

static cllm_status link_send(void *ud, int seq, int64_t n_past, int64_t n, int64_t n_outputs,
                             const float *act, float *logits) {
    cllm_pipe *p = ud;
    if (logits && p->n_pending == CLLM_PIPE_MAX_SEQS) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "pipeline: more than %d logits asked at once",
                          CLLM_PIPE_MAX_SEQS);
    }
    int slot;
    CLLM_TRY(take_slot(p, &slot));
    memcpy(p->send_msg[slot] + CLLM_PIPE_HEADER_BYTES, act, (size_t)n * p->plan.act_row);
    p->n_batches++;
    const int64_t h[8] = {OP_BATCH, n_past, n, n_outputs, logits != NULL, seq, 0, 0};
    CLLM_TRY(send_batch(p, slot, h, n));
    if (!logits) return CLLM_OK;
    /* posted now, so that the last rank's logits go as soon as they are
     * computed; messages of one sender and tag arrive in the order sent, so
     * each batch's logits land in its buffer */
    const int last = p->size - 1;
    const int rc = MPI_Irecv(logits, (int)((size_t)n_outputs * p->plan.logits_row), MPI_BYTE, last,
                             TAG_LOGITS, MPI_COMM_WORLD, &p->pending[p->n_pending]);
    if (rc != MPI_SUCCESS) return mpi_error(rc, "receiving the logits");
    p->n_pending++;
    return CLLM_OK;
}

static cllm_status link_wait(void *ud) {
    cllm_pipe *p = ud;
    cllm_status st = CLLM_OK;
    for (int i = 0; i < p->n_pending; i++) {
        if (st == CLLM_OK) st = wait_req(p, &p->pending[i], "(logits) from", p->size - 1);
        if (st != CLLM_OK && p->pending[i] != MPI_REQUEST_NULL) {
            MPI_Cancel(&p->pending[i]); /* the pipeline is given up */
            p->pending[i] = MPI_REQUEST_NULL;
        }
    }
    p->n_pending = 0;
    return st;
}

/* ---- open ----------------------------------------------------------------- */

static cllm_status pipe_load(cllm_pipe *p, const char *path, const cllm_plan_params *fp) {
    CLLM_TRY(cllm_pipe_plan_file(path, fp, p->size, &p->plan));
    const cllm_pipe_rank_plan *rp = &p->plan.ranks[p->rank];
    cllm_placement pl;
    CLLM_TRY(cllm_placement_init_cpu(&pl, (int)p->plan.n_layer));
    cllm_placement_restrict(&pl, rp->layer_begin, rp->layer_end);
    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = false; /* read, as planned (pipeline.c) */
    mp.progress = false;
    const cllm_status st = cllm_model_load_placed(path, &mp, &pl, &p->m);
    cllm_placement_free(&pl);
    CLLM_TRY(st);
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = p->plan.n_ctx;
    sp.n_batch = p->plan.n_batch;
    sp.n_threads = fp->n_threads;
    sp.type_k = fp->type_k, sp.type_v = fp->type_v;
    sp.n_seq = fp->n_sessions;
    p->n_seq = fp->n_sessions;
    CLLM_TRY(cllm_session_new(p->m, &sp, &p->s));

    /* the buffers of the exchange, exactly as planned */
    p->msg_bytes = cllm_pipe_msg_bytes(&p->plan);
    const bool last = p->rank == p->size - 1;
    if (p->size > 1) {
        if (p->rank > 0) {
            if (!(p->recv_msg = cllm_malloc(p->msg_bytes))) goto nomem;
            p->exchange += p->msg_bytes;
        }
        for (int i = 0; i < 2 && !last; i++) {
            if (!(p->send_msg[i] = cllm_malloc(p->msg_bytes))) goto nomem;
            p->exchange += p->msg_bytes;
        }
        if (last) {
            if (!(p->logits_out = cllm_malloc(p->plan.logits_row))) goto nomem;
            p->exchange += p->plan.logits_row;
        }
    }
    if (p->rank == 0 && p->size > 1) {
        cllm_session_set_link(p->s,
                              &(cllm_session_link){.ud = p, .send = link_send, .wait = link_wait});
    }
    return CLLM_OK;
nomem:
    return cllm_error(CLLM_ERR_NOMEM, "pipeline: out of host memory for the exchange buffers");
}

/* Whether this rank allocated what the plan says: per kind, the session's
 * planned == allocated == the plan of the ranks, and the exchange buffers. */
static bool memory_exact(const cllm_pipe *p, size_t *total) {
    const cllm_pipe_rank_plan *rp = &p->plan.ranks[p->rank];
    bool same = p->exchange == rp->exchange;
    *total = p->exchange;
    const cllm_memory_report r = cllm_session_memory(p->s);
    for (int k = 0; k < CLLM_MEM_COUNT; k++) {
        same = same && r.planned[k] == r.allocated[k] && rp->bytes[k] == r.allocated[k];
        *total += r.allocated[k];
    }
    return same;
}

/* Fault injection for the tests: CLLM_PIPE_FAULT="RANK:BATCH:stall|fail"
 * makes rank RANK stall (stop answering) or fail at its BATCH-th batch. */
static void read_fault(cllm_pipe *p) {
    p->fault_batch = -1;
    const char *f = getenv("CLLM_PIPE_FAULT");
    int rank = -1, batch = -1;
    char kind[16] = {0};
    if (f && sscanf(f, "%d:%d:%15s", &rank, &batch, kind) == 3 && rank == p->rank) {
        p->fault_batch = batch;
        snprintf(p->fault_kind, sizeof(p->fault_kind), "%s", kind);
    }
}

cllm_status cllm_pipe_open(const char *path, const cllm_plan_params *fp, const cllm_pipe_opts *opts,
                           cllm_pipe **out) {
    if (!path || !out) return CLLM_NULL_ARG("path or out");
    int done = 0;
    MPI_Initialized(&done);
    if (!done) return cllm_error(CLLM_ERR_INVALID_ARG, "pipeline: MPI is not started");
    cllm_pipe *p = cllm_calloc(1, sizeof(*p));
    if (!p) return cllm_error(CLLM_ERR_NOMEM, "pipeline: out of host memory");
    p->o = opts ? *opts : cllm_pipe_default_opts();
    if (!(p->o.timeout_s > 0)) p->o.timeout_s = cllm_pipe_default_opts().timeout_s;
    p->send_req[0] = p->send_req[1] = MPI_REQUEST_NULL;
    for (int i = 0; i < CLLM_PIPE_MAX_SEQS; i++) p->pending[i] = MPI_REQUEST_NULL;
    MPI_Comm_rank(MPI_COMM_WORLD, &p->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p->size);
    read_fault(p);
    const cllm_plan_params params = fp ? *fp : cllm_plan_default_params();
    cllm_status st = pipe_load(p, path, &params);

    /* every rank's outcome to rank 0, which reports the first failure; the
     * others learn that one failed */
    char mine[ERR_TEXT] = {0};
    size_t total = 0;
    if (st == CLLM_OK && !memory_exact(p, &total)) {
        st = cllm_error(CLLM_ERR_BACKEND, "pipeline: rank %d allocated other bytes than planned",
                        p->rank);
    }
    if (st != CLLM_OK) snprintf(mine, sizeof(mine), "%s", cllm_last_error());
    char *all = p->rank == 0 ? cllm_calloc((size_t)p->size, ERR_TEXT) : NULL;
    if (p->rank == 0 && !all) {
        st = cllm_error(CLLM_ERR_NOMEM, "pipeline: out of host memory");
        snprintf(mine, sizeof(mine), "%s", cllm_last_error());
    }
    const int rc = MPI_Gather(mine, ERR_TEXT, MPI_CHAR, all, ERR_TEXT, MPI_CHAR, 0, MPI_COMM_WORLD);
    int failed = st != CLLM_OK, any = 0;
    if (rc == MPI_SUCCESS) {
        MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    } else {
        any = 1;
    }
    if (p->rank == 0 && any && st == CLLM_OK) {
        for (int r = 1; r < p->size && all; r++) {
            if (all[(size_t)r * ERR_TEXT]) {
                /* a plan that does not fit names its rank already */
                st = cllm_error(CLLM_ERR_IO, "%s%s",
                                strstr(all + (size_t)r * ERR_TEXT, "rank") ? "" : "pipeline rank: ",
                                all + (size_t)r * ERR_TEXT);
                break;
            }
        }
        if (st == CLLM_OK) st = cllm_error(CLLM_ERR_IO, "pipeline: a rank failed to start");
    } else if (any && st == CLLM_OK) {
        st = cllm_error(CLLM_ERR_IO, "pipeline: another rank failed to start");
    }
    cllm_free(all);
    if (st != CLLM_OK) {
        cllm_pipe_free(p);
        return st;
    }
    if (!p->o.quiet) {
        const cllm_pipe_rank_plan *rp = &p->plan.ranks[p->rank];
        char tb[32];
        fprintf(stderr,
                "cllm pipeline: rank %d of %d: layers %d-%d%s%s, memory planned == allocated "
                "(%s)\n",
                p->rank, p->size, rp->layer_begin, rp->layer_end - 1,
                rp->has_input ? ", token embeddings" : "", rp->has_output ? ", output" : "",
                cllm_format_size(total, tb, sizeof(tb)));
    }
    *out = p;
    return CLLM_OK;
}

int cllm_pipe_rank(const cllm_pipe *p) { return p ? p->rank : 0; }
int cllm_pipe_size(const cllm_pipe *p) { return p ? p->size : 0; }
const cllm_pipe_plan *cllm_pipe_get_plan(const cllm_pipe *p) { return p ? &p->plan : NULL; }
cllm_model *cllm_pipe_model(cllm_pipe *p) { return p ? p->m : NULL; }
cllm_session *cllm_pipe_session(cllm_pipe *p) { return p ? p->s : NULL; }
int cllm_pipe_n_seq(const cllm_pipe *p) { return p ? p->n_seq : 0; }

double cllm_pipe_comm_seconds(const cllm_pipe *p) { return p ? p->comm_s : 0.0; }
uint64_t cllm_pipe_bytes_sent(const cllm_pipe *p) { return p ? p->bytes_sent : 0; }

/* ---- ranks > 0 ------------------------------------------------------------- */

/* Tells rank 0 why this rank gives up (best effort, bounded wait). */
static void report_error(void) {
    char text[ERR_TEXT];
    snprintf(text, sizeof(text), "%s", cllm_last_error());
    MPI_Request req;
    if (MPI_Isend(text, (int)strlen(text) + 1, MPI_CHAR, 0, TAG_ERROR, MPI_COMM_WORLD, &req) !=
        MPI_SUCCESS) {
        return;
    }
    const double t0 = now_s();
    int flag = 0;
    while (!flag && now_s() - t0 < 5.0) {
        if (MPI_Test(&req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) return;
        const struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static cllm_status serve_one(cllm_pipe *p, bool *stop) {
    const bool last = p->rank == p->size - 1;
    MPI_Request req;
    int rc = MPI_Irecv(p->recv_msg, (int)p->msg_bytes, MPI_BYTE, p->rank - 1, TAG_BATCH,
                       MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return mpi_error(rc, "receiving a batch");
    cllm_status st = wait_req_for(p, &req, "(a batch) from", p->rank - 1,
                                  p->o.idle_forever ? 0.0 : p->o.timeout_s);
    if (st != CLLM_OK) {
        MPI_Cancel(&req);
        return st;
    }
    int64_t h[8];
    memcpy(h, p->recv_msg, sizeof(h));
    if (h[0] == OP_STOP) {
        *stop = true;
        if (last) return CLLM_OK;
        int slot;
        CLLM_TRY(take_slot(p, &slot));
        CLLM_TRY(send_batch(p, slot, h, 0));
        return CLLM_OK;
    }
    if (h[0] != OP_BATCH) {
        return cllm_error(CLLM_ERR_IO, "pipeline: rank %d: unknown message %lld from rank %d",
                          p->rank, (long long)h[0], p->rank - 1);
    }
    if ((int64_t)p->n_batches == p->fault_batch) {
        if (!strcmp(p->fault_kind, "stall")) {
            sleep((unsigned)(3 * p->o.timeout_s + 1)); /* stops answering */
        } else {
            return cllm_error(CLLM_ERR_IO, "pipeline: rank %d: injected failure at batch %lld",
                              p->rank, (long long)p->n_batches);
        }
    }
    p->n_batches++;
    const int64_t n_past = h[1], n = h[2], n_outputs = h[3];
    const bool want = h[4] != 0;
    if (h[5] < 0 || h[5] >= p->n_seq) {
        return cllm_error(CLLM_ERR_IO, "pipeline: rank %d: sequence %lld of %d", p->rank,
                          (long long)h[5], p->n_seq);
    }
    const int seq = (int)h[5];
    const float *act = (const float *)(p->recv_msg + CLLM_PIPE_HEADER_BYTES);
    if (last) {
        /* logits of the last row (n_outputs > 1 needs all_logits, not planned here) */
        if (n_outputs != 1) {
            return cllm_error(CLLM_ERR_IO, "pipeline: rank %d: %lld logit rows asked, 1 planned",
                              p->rank, (long long)n_outputs);
        }
        CLLM_TRY(cllm_session_stage_run(p->s, seq, n_past, n, n_outputs, act, p->logits_out));
        if (!want) return CLLM_OK;
        rc = MPI_Isend(p->logits_out, (int)p->plan.logits_row, MPI_BYTE, 0, TAG_LOGITS,
                       MPI_COMM_WORLD, &req);
        if (rc != MPI_SUCCESS) return mpi_error(rc, "sending the logits to rank 0");
        p->bytes_sent += p->plan.logits_row;
        return wait_req(p, &req, "(logits) taken by", 0);
    }
    int slot;
    CLLM_TRY(take_slot(p, &slot));
    st = cllm_session_stage_run(p->s, seq, n_past, n, n_outputs, act,
                                (float *)(p->send_msg[slot] + CLLM_PIPE_HEADER_BYTES));
    if (st != CLLM_OK) return st;
    return send_batch(p, slot, h, n);
}

cllm_status cllm_pipe_serve(cllm_pipe *p) {
    if (!p) return CLLM_NULL_ARG("the pipeline");
    if (p->rank == 0) return cllm_error(CLLM_ERR_INVALID_ARG, "pipeline: rank 0 does not serve");
    bool stop = false;
    cllm_status st = CLLM_OK;
    while (!stop && st == CLLM_OK) st = serve_one(p, &stop);
    /* the last stop or batch sent reaches the next rank before this one leaves */
    for (int i = 0; i < 2 && st == CLLM_OK; i++) {
        if (p->send_req[i] != MPI_REQUEST_NULL) {
            st = wait_req(p, &p->send_req[i], "taken by", p->rank + 1);
        }
    }
    if (st != CLLM_OK) report_error();
    return st;
}

cllm_status cllm_pipe_close(cllm_pipe *p) {
    if (!p) return CLLM_NULL_ARG("the pipeline");
    if (p->rank != 0 || p->size < 2) return CLLM_OK;
    int slot;
    CLLM_TRY(take_slot(p, &slot));
    const int64_t h[8] = {OP_STOP, 0, 0, 0, 0, 0, 0, 0};
    CLLM_TRY(send_batch(p, slot, h, 0));
    for (int i = 0; i < 2; i++) {
        if (p->send_req[i] != MPI_REQUEST_NULL) {
            CLLM_TRY(wait_req(p, &p->send_req[i], "taken by", 1));
        }
    }
    return CLLM_OK;
}

cllm_status cllm_pipe_gather_stats(cllm_pipe *p, cllm_pipe_stats *out) {
    if (!p) return CLLM_NULL_ARG("the pipeline");
    double comm = p->comm_s;
    uint64_t sent = p->bytes_sent, batches = p->n_batches;
    int rc = MPI_Gather(&comm, 1, MPI_DOUBLE, out ? out->comm_s : NULL, 1, MPI_DOUBLE, 0,
                        MPI_COMM_WORLD);
    if (rc == MPI_SUCCESS) {
        rc = MPI_Gather(&sent, 1, MPI_UINT64_T, out ? out->bytes_sent : NULL, 1, MPI_UINT64_T, 0,
                        MPI_COMM_WORLD);
    }
    if (rc == MPI_SUCCESS) {
        rc = MPI_Gather(&batches, 1, MPI_UINT64_T, out ? out->batches : NULL, 1, MPI_UINT64_T, 0,
                        MPI_COMM_WORLD);
    }
    return rc == MPI_SUCCESS ? CLLM_OK : mpi_error(rc, "gathering the figures");
}

cllm_status cllm_pipe_measure_transfer(cllm_pipe *p, size_t bytes, int reps, double *one_way_s) {
    if (one_way_s) *one_way_s = 0;
    if (!p) return CLLM_NULL_ARG("the pipeline");
    if (p->size < 2 || p->rank > 1 || reps < 1) return CLLM_OK;
    char *buf = cllm_malloc(bytes ? bytes : 1);
    if (!buf) return cllm_error(CLLM_ERR_NOMEM, "pipeline: out of host memory");
    memset(buf, 0, bytes ? bytes : 1);
    const int peer = 1 - p->rank, tag = TAG_BATCH + 100;
    double t0 = 0;
    int rc = MPI_SUCCESS;
    for (int i = -1; i < reps && rc == MPI_SUCCESS; i++) { /* i = -1: not counted */
        if (i == 0) t0 = now_s();
        if (p->rank == 0) {
            rc = MPI_Send(buf, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
            if (rc == MPI_SUCCESS) {
                rc = MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD,
                              MPI_STATUS_IGNORE);
            }
        } else {
            rc = MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (rc == MPI_SUCCESS)
                rc = MPI_Send(buf, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
        }
    }
    const double t = now_s() - t0;
    cllm_free(buf);
    if (rc != MPI_SUCCESS) return mpi_error(rc, "measuring a transfer");
    if (one_way_s && p->rank == 0) *one_way_s = t / (2.0 * reps);
    return CLLM_OK;
}

void cllm_pipe_free(cllm_pipe *p) {
    if (!p) return;
    cllm_session_free(p->s);
    cllm_model_free(p->m);
    cllm_free(p->recv_msg);
    cllm_free(p->send_msg[0]);
    cllm_free(p->send_msg[1]);
    cllm_free(p->logits_out);
    cllm_free(p);
}
