/* The plan of a pipeline across hosts (cllm-pipeline.h): contiguous layer
 * ranges, each measured as the session of its rank, and the buffers the
 * ranks exchange through. No MPI here (pipeline-mpi.c is the transport). */
#include "cllm-pipeline.h"
#include "core/hostmem.h"
#include "pipeline/pipeline-impl.h"
#include "runtime/place.h"
#include "runtime/instance.h"

#include <string.h>

void cllm_pipe_split(int n_layer, int n_ranks, int r, int *begin, int *end) {
    /* equal ranges; the first n_layer % n_ranks ranks take one more */
    const int q = n_layer / n_ranks, rem = n_layer % n_ranks;
    *begin = r * q + CLLM_MIN(r, rem);
    *end = *begin + q + (r < rem ? 1 : 0);
}

size_t cllm_pipe_msg_bytes(const cllm_pipe_plan *plan) {
    return plan->act_header + (size_t)plan->n_batch * plan->act_row;
}

size_t cllm_pipe_exchange_bytes(const cllm_pipe_plan *plan, int r) {
    const size_t msg = cllm_pipe_msg_bytes(plan);
    if (plan->n_ranks == 1) return 0;
    size_t n = 0;
    if (r > 0) n += msg;                     /* the batch received */
    if (r < plan->n_ranks - 1) n += 2 * msg; /* two batches in flight to the next */
    /* the last rank's logits sent back (rank 0 receives them into its
     * session's logits) */
    if (r == plan->n_ranks - 1) n += plan->logits_row;
    return n;
}

static size_t budget_of(const cllm_plan_params *fp) {
    for (int i = 0; i < fp->n_budgets; i++) {
        if (!strcmp(fp->budgets[i].device, "cpu")) return fp->budgets[i].bytes;
    }
    return 0;
}

/* Measures rank r's part: its weights (read), and its session's state,
 * compute and workspace (sh: n_seq sequences), in measure mode. */
static cllm_status plan_rank(const cllm_arch *arch, const cllm_hparams *hp, cllm_weights *w,
                             const cllm_shape *sh, cllm_pipe_plan *plan, int r) {
    cllm_pipe_rank_plan *rp = &plan->ranks[r];
    cllm_pipe_split((int)hp->n_layer, plan->n_ranks, r, &rp->layer_begin, &rp->layer_end);
    cllm_placement pl;
    CLLM_TRY(cllm_placement_init_cpu(&pl, (int)hp->n_layer));
    cllm_placement_restrict(&pl, rp->layer_begin, rp->layer_end);
    rp->has_input = !pl.no_input;
    rp->has_output = pl.output_device != CLLM_PLACE_NONE;
    const int cpu = cllm_placement_cpu(&pl);
    size_t wbytes[CLLM_PLACE_MAX_DEVICES];
    cllm_buffer *wbuf = NULL;
    cllm_instance in = {0};
    cllm_status st = CLLM_OK;
    if ((st = cllm_place_weights(&pl, w, wbytes, NULL)) != CLLM_OK) goto done;
    wbuf = cllm_buffer_new_measure(cllm_placement_buft(&pl, cpu), wbytes[cpu]);
    if (!wbuf) {
        st = cllm_error(CLLM_ERR_NOMEM, "plan: out of host memory");
        goto done;
    }
    cllm_buffer *bufs[CLLM_PLACE_MAX_DEVICES] = {0};
    bufs[cpu] = wbuf;
    (void)cllm_place_weights(&pl, w, wbytes, bufs); /* checked above */
    const cllm_instance_args ia = {
        .arch = arch, .hp = hp, .w = w, .pl = &pl, .shape = *sh, .measure = true};
    if ((st = cllm_instance_init(&in, &ia)) != CLLM_OK) goto done;
    for (int k = 0; k < CLLM_MEM_COUNT; k++) rp->bytes[k] = in.bytes[cpu][k];
    rp->exchange = cllm_pipe_exchange_bytes(plan, r);
    rp->total = rp->exchange;
    for (int k = 0; k < CLLM_MEM_COUNT; k++) rp->total += rp->bytes[k];
done:
    cllm_instance_free(&in);
    /* the weights tree is planned again for the next rank */
    for (int i = 0; i < cllm_context_n_tensors(w->ctx); i++) {
        cllm_tensor *t = cllm_context_tensor(w->ctx, i);
        t->buffer = NULL;
        t->data = NULL;
    }
    cllm_buffer_free(wbuf);
    cllm_placement_free(&pl);
    return st;
}

cllm_status cllm_pipe_plan_file(const char *path, const cllm_plan_params *fp, int n_ranks,
                                cllm_pipe_plan *out) {
    if (!path || !out) return CLLM_NULL_ARG("path or out");
    cllm_plan_params p = fp ? *fp : cllm_plan_default_params();
    /* a rank reads its tensors: a file's tensors need not lie in layer
     * order (many are sorted by name: blk.0, blk.1, blk.10, ...), so the
     * span a rank would map can be most of the file */
    p.use_mmap = false;
    cllm_gguf *g = NULL;
    cllm_weights *w = NULL;
    cllm_pipe_plan plan;
    memset(&plan, 0, sizeof(plan));
    CLLM_TRY(cllm_gguf_open(path, &g));
    cllm_status st;
    const char *arch_name = NULL;
    const cllm_arch *arch = NULL;
    cllm_hparams hp;
    if ((st = cllm_gguf_get_str(g, "general.architecture", &arch_name)) != CLLM_OK) goto done;
    arch = cllm_arch_find(arch_name);
    if (!arch) {
        st = cllm_error(CLLM_ERR_UNSUPPORTED, "%s: architecture \"%s\" is not supported", path,
                        arch_name);
        goto done;
    }
    if ((st = arch->load_hparams(g, &hp)) != CLLM_OK) goto done;
    if (n_ranks < 1 || n_ranks > CLLM_PIPE_MAX_RANKS || n_ranks > hp.n_layer) {
        st = cllm_error(CLLM_ERR_INVALID_ARG,
                        "pipeline: %d ranks for %lld layers (each rank needs a layer; at most %d "
                        "ranks)",
                        n_ranks, (long long)hp.n_layer, CLLM_PIPE_MAX_RANKS);
        goto done;
    }
    if (p.n_sessions < 1 || p.n_sessions > CLLM_PIPE_MAX_SEQS) {
        st = cllm_error(CLLM_ERR_INVALID_ARG,
                        "pipeline: %d concurrent sequences is out of range [1, %d]", p.n_sessions,
                        CLLM_PIPE_MAX_SEQS);
        goto done;
    }
    if (n_ranks > 1 && !arch->layer_ranges) {
        st = cllm_error(CLLM_ERR_UNSUPPORTED,
                        "%s: architecture %s cannot run a range of its layers on a rank", path,
                        arch->name);
        goto done;
    }
    cllm_shape sh;
    const cllm_shape_params shp = {.n_ctx = p.n_ctx,
                                   .n_batch = p.n_batch,
                                   .type_k = p.type_k,
                                   .type_v = p.type_v,
                                   .n_threads = p.n_threads,
                                   .n_seq = p.n_sessions};
    if ((st = cllm_shape_resolve(&hp, &shp, "pipeline", &sh)) != CLLM_OK) goto done;
    if ((st = cllm_weights_new(g, arch, &hp, &w)) != CLLM_OK) goto done;
    plan.n_ranks = n_ranks;
    plan.n_layer = hp.n_layer;
    plan.n_embd = hp.n_embd;
    plan.n_vocab = hp.n_vocab;
    plan.n_ctx = sh.n_ctx;
    plan.n_batch = sh.n_batch;
    plan.n_seq = p.n_sessions;
    plan.act_header = CLLM_PIPE_HEADER_BYTES;
    plan.act_row = (size_t)hp.n_embd * sizeof(float);
    plan.logits_row = (size_t)hp.n_vocab * sizeof(float);
    const size_t budget = budget_of(&p);
    for (int r = 0; r < n_ranks; r++) {
        if ((st = plan_rank(arch, &hp, w, &sh, &plan, r)) != CLLM_OK) goto done;
        plan.ranks[r].budget = budget;
    }
    *out = plan;
    for (int r = 0; r < n_ranks && budget; r++) {
        const cllm_pipe_rank_plan *rp = &plan.ranks[r];
        if (rp->total <= budget) continue;
        char need[32], have[32], shortb[32];
        st = cllm_error(
            CLLM_ERR_TOO_LARGE,
            "pipeline: rank %d (layers %d-%d) needs %s, its budget is %s: %s (%zu "
            "bytes) short",
            r, rp->layer_begin, rp->layer_end - 1, cllm_format_size(rp->total, need, sizeof(need)),
            cllm_format_size(budget, have, sizeof(have)),
            cllm_format_size(rp->total - budget, shortb, sizeof(shortb)), rp->total - budget);
        break;
    }
done:
    cllm_weights_free(w);
    cllm_gguf_free(g);
    return st;
}

void cllm_pipe_plan_print(const cllm_pipe_plan *plan, FILE *f) {
    if (!plan || !f) return;
    char b[CLLM_MEM_COUNT + 3][32];
    fprintf(f, "pipeline: %d ranks, %lld layers, context %lld, batch %lld, %d sequence%s\n",
            plan->n_ranks, (long long)plan->n_layer, (long long)plan->n_ctx,
            (long long)plan->n_batch, plan->n_seq, plan->n_seq == 1 ? "" : "s");
    fprintf(f, "%-5s %-9s %-6s %10s %10s %10s %10s %10s %10s %10s\n", "rank", "layers", "holds",
            "weights", "state", "compute", "workspace", "exchange", "total", "budget");
    for (int r = 0; r < plan->n_ranks; r++) {
        const cllm_pipe_rank_plan *rp = &plan->ranks[r];
        char layers[32], holds[8];
        snprintf(layers, sizeof(layers), "%d-%d", rp->layer_begin, rp->layer_end - 1);
        snprintf(holds, sizeof(holds), "%s%s", rp->has_input ? "in" : "",
                 rp->has_output ? (rp->has_input ? "+out" : "out") : "");
        for (int k = 0; k < CLLM_MEM_COUNT; k++) cllm_format_size(rp->bytes[k], b[k], 32);
        cllm_format_size(rp->exchange, b[CLLM_MEM_COUNT], 32);
        cllm_format_size(rp->total, b[CLLM_MEM_COUNT + 1], 32);
        if (rp->budget) {
            cllm_format_size(rp->budget, b[CLLM_MEM_COUNT + 2], 32);
        } else {
            snprintf(b[CLLM_MEM_COUNT + 2], 32, "-");
        }
        fprintf(f, "%-5d %-9s %-6s %10s %10s %10s %10s %10s %10s %10s%s\n", r, layers, holds,
                b[CLLM_MEM_WEIGHTS], b[CLLM_MEM_STATE], b[CLLM_MEM_COMPUTE], b[CLLM_MEM_WORKSPACE],
                b[CLLM_MEM_COUNT], b[CLLM_MEM_COUNT + 1], b[CLLM_MEM_COUNT + 2],
                rp->budget && rp->total > rp->budget ? "  SHORT" : "");
    }
    fprintf(f,
            "per token: %zu bytes of activations from each rank to the next (%d hop%s), %zu "
            "bytes of logits from rank %d to rank 0; a batch adds a %zu-byte header per hop\n",
            plan->act_row, plan->n_ranks - 1, plan->n_ranks == 2 ? "" : "s",
            plan->n_ranks > 1 ? plan->logits_row : (size_t)0, plan->n_ranks - 1, plan->act_header);
}
