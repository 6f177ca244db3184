/* Under mpirun: the pipeline of run and serve across the ranks. */
#include "cllm-pipeline.h"
#include "commands.h"

#include <stdlib.h>
#include <unistd.h>

int cli_pipe_open(const char *cmd, const cli_gen *g, int n_sessions, double timeout_s, bool server,
                  cllm_pipe **out) {
    if (cllm_pipe_init(NULL, NULL) != CLLM_OK) {
        cli_lib_error(cmd);
        return 1;
    }
    cllm_plan_params fp = g->fit; /* --mem cpu=SIZE: each rank's budget */
    fp.n_ctx = g->n_ctx, fp.n_batch = g->n_batch, fp.n_threads = g->n_threads;
    fp.type_k = g->type_k, fp.type_v = g->type_v, fp.use_mmap = !g->no_mmap;
    fp.n_sessions = n_sessions;
    cllm_pipe_opts po = cllm_pipe_default_opts();
    if (timeout_s > 0) po.timeout_s = timeout_s;
    po.idle_forever = server;
    po.quiet = !g->verbose;
    cllm_pipe *p = NULL;
    if (cllm_pipe_open(g->model, &fp, &po, &p) != CLLM_OK) {
        /* every rank knows; rank 0 reports the first failure */
        int rank = 0;
        const char *r = getenv("OMPI_COMM_WORLD_RANK");
        if (r) rank = atoi(r);
        if (rank == 0) cli_lib_error(cmd);
        cllm_pipe_finalize(false);
        return 1;
    }
    if (cllm_pipe_rank(p) == 0) {
        *out = p;
        return -1;
    }
    cllm_status st = cllm_pipe_serve(p);
    if (st == CLLM_OK) st = cllm_pipe_gather_stats(p, NULL);
    cllm_pipe_free(p);
    if (st != CLLM_OK) {
        /* rank 0 reports it (and ends the job); if it cannot, say it here */
        cli_lib_error(cmd);
        sleep(5);
    }
    cllm_pipe_finalize(st != CLLM_OK);
    return st == CLLM_OK ? 0 : 1;
}

bool cli_pipe_close(const char *cmd, cllm_pipe *p) {
    if (cllm_pipe_close(p) != CLLM_OK) {
        cli_lib_error(cmd);
        return false;
    }
    cllm_pipe_stats stats;
    if (cllm_pipe_gather_stats(p, &stats) != CLLM_OK) {
        cli_lib_error(cmd);
        return false;
    }
    for (int r = 0; r < cllm_pipe_size(p); r++) {
        fprintf(stderr, "pipeline rank %d: %llu batches, %llu bytes sent, %.3f s waiting\n", r,
                (unsigned long long)stats.batches[r], (unsigned long long)stats.bytes_sent[r],
                stats.comm_s[r]);
    }
    return true;
}
