/* The fit planner (fit.h): placement of layers across devices within their
 * budgets, from metadata and measure-mode probes. */
#include "runtime/fit.h"
#include "backend/backend-impl.h"
#include "backend/cpu/cpu.h"
#include "backend/test/test-backend.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { GROUP_INPUT = CLLM_FIT_GROUP_INPUT, GROUP_OUTPUT = CLLM_FIT_GROUP_OUTPUT };

typedef struct fit_ctx {
    const cllm_gguf *g;
    const cllm_arch *arch;
    cllm_hparams hp;
    cllm_weights *w;
    int *group; /* per weight tensor (creation order): layer, GROUP_INPUT or GROUP_OUTPUT */
    cllm_plan_params p;

    int n_dev; /* the CPU last */
    cllm_device *devs[CLLM_SCHED_MAX_BACKENDS];
    size_t budget[CLLM_SCHED_MAX_BACKENDS];
    bool given[CLLM_SCHED_MAX_BACKENDS];
    cllm_backend *backends[CLLM_SCHED_MAX_BACKENDS]; /* made on first use */

    /* the context being probed */
    int64_t n_ctx, n_batch;
    cllm_context *kv_ctx;
    cllm_tensor **k, **v;

    int n_probes;
} fit_ctx;

typedef struct placement {
    int *layer_dev; /* [n_layer] */
    int output_dev;
} placement;

typedef struct probe_result {
    size_t bytes[CLLM_SCHED_MAX_BACKENDS][CLLM_MEM_COUNT];
} probe_result;

/* ---- parameters -------------------------------------------------------- */

cllm_plan_params cllm_plan_default_params(void) {
    return (cllm_plan_params){.n_ctx = 0,
                              .n_batch = 512,
                              .n_sessions = 1,
                              .kv_type = CLLM_TYPE_F16,
                              .n_threads = 0,
                              .use_mmap = true};
}

cllm_status cllm_plan_add_budget(cllm_plan_params *p, const char *device, size_t bytes) {
    if (!*device || strlen(device) >= sizeof(p->budgets[0].device)) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "--mem: bad device name \"%s\"", device);
    }
    for (int i = 0; i < p->n_budgets; i++) {
        if (strcmp(p->budgets[i].device, device) == 0) {
            p->budgets[i].bytes = bytes;
            return CLLM_OK;
        }
    }
    if (p->n_budgets >= CLLM_PLAN_MAX_BUDGETS) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "--mem: more than %d budgets",
                          CLLM_PLAN_MAX_BUDGETS);
    }
    cllm_plan_budget *b = &p->budgets[p->n_budgets++];
    snprintf(b->device, sizeof(b->device), "%s", device);
    b->bytes = bytes;
    return CLLM_OK;
}

cllm_status cllm_plan_parse_mem(cllm_plan_params *p, const char *arg) {
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "--mem \"%s\": expected DEVICE=SIZE (e.g. cpu=16GiB, test0=64MiB)", arg);
    }
    char dev[32];
    const size_t n = (size_t)(eq - arg);
    if (n >= sizeof(dev)) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "--mem \"%s\": device name too long", arg);
    }
    memcpy(dev, arg, n);
    dev[n] = '\0';
    size_t bytes;
    if (!cllm_parse_size(eq + 1, &bytes)) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "--mem \"%s\": \"%s\" is not a size (bytes, or with a K, M, G, T "
                          "suffix: 512MiB, 1.5G)",
                          arg, eq + 1);
    }
    return cllm_plan_add_budget(p, dev, bytes);
}

const char *cllm_format_size(size_t bytes, char *buf, size_t size) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) v /= 1024.0, u++;
    if (u == 0) {
        snprintf(buf, size, "%zu B", bytes);
    } else {
        snprintf(buf, size, "%.2f %s", v, units[u]);
    }
    return buf;
}

/* ---- set-up ------------------------------------------------------------ */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int cllm_fit_weight_group(const char *name, int64_t n_layer) {
    int l;
    char dot;
    if (sscanf(name, "blk.%d%c", &l, &dot) == 2 && dot == '.' && l >= 0 && l < n_layer) return l;
    if (strncmp(name, "output", 6) == 0) return CLLM_FIT_GROUP_OUTPUT;
    return CLLM_FIT_GROUP_INPUT;
}

static cllm_status find_devices(fit_ctx *f) {
    cllm_device *cpu = NULL;
    for (int i = 0; i < cllm_registry_device_count(); i++) {
        cllm_device *d = cllm_registry_device(i);
        if (cllm_device_kind_of(d) == CLLM_DEVICE_CPU) {
            if (!cpu) cpu = d;
            continue;
        }
        if (f->n_dev < CLLM_SCHED_MAX_BACKENDS - 1) f->devs[f->n_dev++] = d;
    }
    if (!cpu) return cllm_error(CLLM_ERR_BACKEND, "plan: no CPU device");
    f->devs[f->n_dev++] = cpu;
    for (int i = 0; i < f->n_dev; i++) {
        size_t fr = 0, tot = 0;
        cllm_device_memory(f->devs[i], &fr, &tot);
        f->budget[i] = fr;
    }
    for (int b = 0; b < f->p.n_budgets; b++) {
        int found = -1;
        for (int i = 0; i < f->n_dev && found < 0; i++) {
            if (strcmp(cllm_device_name(f->devs[i]), f->p.budgets[b].device) == 0) found = i;
        }
        if (found < 0) {
            char names[256] = "";
            for (int i = 0; i < f->n_dev; i++) {
                const size_t len = strlen(names);
                snprintf(names + len, sizeof(names) - len, "%s%s", i ? ", " : "",
                         cllm_device_name(f->devs[i]));
            }
            return cllm_error(CLLM_ERR_INVALID_ARG, "--mem: unknown device \"%s\" (devices: %s)",
                              f->p.budgets[b].device, names);
        }
        f->budget[found] = f->p.budgets[b].bytes;
        f->given[found] = true;
    }
    return CLLM_OK;
}

static cllm_status get_backend(fit_ctx *f, int d, cllm_backend **out) {
    if (!f->backends[d]) {
        if (cllm_device_kind_of(f->devs[d]) == CLLM_DEVICE_CPU) {
            CLLM_TRY(cllm_backend_cpu_new(f->p.n_threads, &f->backends[d]));
        } else {
            CLLM_TRY(cllm_device_init_backend(f->devs[d], NULL, &f->backends[d]));
        }
    }
    *out = f->backends[d];
    return CLLM_OK;
}

static void free_kv(fit_ctx *f) {
    cllm_context_free(f->kv_ctx);
    free(f->k);
    free(f->v);
    f->kv_ctx = NULL;
    f->k = f->v = NULL;
}

static cllm_status make_kv(fit_ctx *f, int64_t n_ctx) {
    free_kv(f);
    const int n_layer = (int)f->hp.n_layer;
    f->n_ctx = n_ctx;
    f->n_batch = CLLM_MIN(f->p.n_batch, n_ctx);
    f->kv_ctx = cllm_context_new(2 * n_layer);
    f->k = calloc((size_t)n_layer, sizeof(*f->k));
    f->v = calloc((size_t)n_layer, sizeof(*f->v));
    if (!f->kv_ctx || !f->k || !f->v) return cllm_error(CLLM_ERR_NOMEM, "plan: out of host memory");
    for (int l = 0; l < n_layer; l++) {
        f->k[l] =
            cllm_tensor_new_2d(f->kv_ctx, f->p.kv_type, cllm_hparams_n_embd_k_gqa(&f->hp), n_ctx);
        f->v[l] =
            cllm_tensor_new_2d(f->kv_ctx, f->p.kv_type, cllm_hparams_n_embd_v_gqa(&f->hp), n_ctx);
        cllm_tensor_set_name(f->k[l], "cache_k-%d", l);
        cllm_tensor_set_name(f->v[l], "cache_v-%d", l);
    }
    return CLLM_OK;
}

/* ---- probes ------------------------------------------------------------ */

static int weight_device(const fit_ctx *f, const placement *pl, int i) {
    const int grp = f->group[i];
    if (grp >= 0) return pl->layer_dev[grp];
    return grp == GROUP_OUTPUT ? pl->output_dev : f->n_dev - 1;
}

/* Lays the static tensors out per device (as cllm_layout_alloc would, in
 * creation order); with `bufs`, places them in those buffers. */
static void lay_out(fit_ctx *f, const placement *pl, size_t *wbytes, size_t *sbytes,
                    cllm_buffer **wbufs, cllm_buffer **sbufs) {
    size_t woff[CLLM_SCHED_MAX_BACKENDS] = {0}, soff[CLLM_SCHED_MAX_BACKENDS] = {0};
    for (int i = 0; i < cllm_context_n_tensors(f->w->ctx); i++) {
        cllm_tensor *t = cllm_context_tensor(f->w->ctx, i);
        const int d = weight_device(f, pl, i);
        cllm_buffer_type *buft = cllm_device_buffer_type(f->devs[d]);
        woff[d] = cllm_align_up(woff[d], cllm_buffer_type_alignment(buft));
        if (wbufs) cllm_buffer_place_tensor(wbufs[d], t, woff[d]);
        woff[d] += cllm_buffer_type_alloc_size(buft, t);
    }
    for (int i = 0; i < cllm_context_n_tensors(f->kv_ctx); i++) {
        cllm_tensor *t = cllm_context_tensor(f->kv_ctx, i);
        const int d = pl->layer_dev[i / 2];
        cllm_buffer_type *buft = cllm_device_buffer_type(f->devs[d]);
        soff[d] = cllm_align_up(soff[d], cllm_buffer_type_alignment(buft));
        if (sbufs) cllm_buffer_place_tensor(sbufs[d], t, soff[d]);
        soff[d] += cllm_buffer_type_alloc_size(buft, t);
    }
    for (int d = 0; d < f->n_dev; d++) {
        wbytes[d] = woff[d];
        sbytes[d] = soff[d];
    }
}

static void unplace(cllm_context *ctx) {
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        cllm_tensor *t = cllm_context_tensor(ctx, i);
        t->data = NULL;
        t->buffer = NULL;
    }
}

/* Measures placement pl: bytes per device and kind (per n_sessions). */
static cllm_status probe(fit_ctx *f, const placement *pl, probe_result *r) {
    f->n_probes++;
    memset(r, 0, sizeof(*r));
    size_t wbytes[CLLM_SCHED_MAX_BACKENDS], sbytes[CLLM_SCHED_MAX_BACKENDS];
    lay_out(f, pl, wbytes, sbytes, NULL, NULL);

    cllm_buffer *wbufs[CLLM_SCHED_MAX_BACKENDS] = {0}, *sbufs[CLLM_SCHED_MAX_BACKENDS] = {0};
    cllm_backend *bes[CLLM_SCHED_MAX_BACKENDS];
    int dev_of_be[CLLM_SCHED_MAX_BACKENDS], nb = 0;
    cllm_sched *s = NULL;
    cllm_context *gctx = NULL;
    cllm_graph *graph = NULL;
    cllm_status st = CLLM_OK;
    for (int d = 0; d < f->n_dev; d++) {
        cllm_buffer_type *buft = cllm_device_buffer_type(f->devs[d]);
        wbufs[d] = cllm_buffer_new_measure(buft, wbytes[d]);
        sbufs[d] = cllm_buffer_new_measure(buft, sbytes[d]);
        if (!wbufs[d] || !sbufs[d]) {
            st = cllm_error(CLLM_ERR_NOMEM, "plan: out of host memory");
            goto done;
        }
        /* a device takes part when it holds something (the CPU always) */
        if (wbytes[d] || sbytes[d] || d == f->n_dev - 1) {
            if ((st = get_backend(f, d, &bes[nb])) != CLLM_OK) goto done;
            dev_of_be[nb++] = d;
        }
    }
    lay_out(f, pl, wbytes, sbytes, wbufs, sbufs);
    if ((st = cllm_sched_new(bes, nb, NULL, &s)) != CLLM_OK) goto done;
    const int gsize = f->arch->graph_size(&f->hp);
    gctx = cllm_context_new(gsize);
    graph = cllm_graph_new(gsize);
    if (!gctx || !graph) {
        st = cllm_error(CLLM_ERR_NOMEM, "plan: out of host memory");
        goto done;
    }
    const cllm_kv_cache kv = {.ctx = f->kv_ctx,
                              .type = f->p.kv_type,
                              .n_ctx = f->n_ctx,
                              .n_layer = (int)f->hp.n_layer,
                              .k = f->k,
                              .v = f->v};
    const cllm_batch_shape worst[2] = {
        {.n_tokens = f->n_batch, .n_past = f->n_ctx - f->n_batch, .n_kv = f->n_ctx, .n_outputs = 1},
        {.n_tokens = 1, .n_past = f->n_ctx - 1, .n_kv = f->n_ctx, .n_outputs = 1},
    };
    for (int i = 0; i < 2 && st == CLLM_OK; i++) {
        cllm_context_reset(gctx);
        cllm_graph_reset(graph);
        const cllm_build_args args = {
            .hp = &f->hp, .w = f->w, .kv = &kv, .shape = worst[i], .ctx = gctx, .graph = graph};
        cllm_graph_io io;
        f->arch->build(&args, &io);
        st = cllm_sched_reserve(s, graph);
    }
    if (st != CLLM_OK) goto done;
    const size_t ns = (size_t)f->p.n_sessions;
    for (int d = 0; d < f->n_dev; d++) {
        r->bytes[d][CLLM_MEM_WEIGHTS] = wbytes[d];
        r->bytes[d][CLLM_MEM_STATE] = sbytes[d] * ns;
    }
    if (f->p.use_mmap) {
        /* the CPU maps the whole data section (runtime/model.c) */
        const uint64_t size = cllm_gguf_file_size(f->g), data = cllm_gguf_data_offset(f->g);
        r->bytes[f->n_dev - 1][CLLM_MEM_WEIGHTS] = data < size ? (size_t)(size - data) : 0;
    }
    for (int b = 0; b < nb; b++) {
        r->bytes[dev_of_be[b]][CLLM_MEM_COMPUTE] = cllm_sched_compute_planned(s, b) * ns;
        r->bytes[dev_of_be[b]][CLLM_MEM_WORKSPACE] = cllm_sched_workspace_planned(s, b) * ns;
    }
done:
    cllm_sched_free(s);
    cllm_graph_free(graph);
    cllm_context_free(gctx);
    unplace(f->w->ctx);
    unplace(f->kv_ctx);
    for (int d = 0; d < f->n_dev; d++) {
        cllm_buffer_free(wbufs[d]);
        cllm_buffer_free(sbufs[d]);
    }
    return st;
}

static size_t total_of(const probe_result *r, int d) {
    size_t n = 0;
    for (int k = 0; k < CLLM_MEM_COUNT; k++) n += r->bytes[d][k];
    return n;
}

static bool fits(const fit_ctx *f, const probe_result *r, int d) {
    return total_of(r, d) <= f->budget[d];
}

/* Layers [first, first + k) of the r remaining at the end go to d, the rest
 * of the r to the CPU. */
static void set_layers(fit_ctx *f, placement *pl, int end, int r, int k, int d) {
    const int cpu = f->n_dev - 1;
    for (int l = end - r; l < end; l++) pl->layer_dev[l] = l >= end - k ? d : cpu;
}

/* The placement for the current context size (f->n_ctx): accelerators take
 * layers from the end as long as they fit; the CPU the rest. */
static cllm_status place(fit_ctx *f, placement *pl, probe_result *r) {
    const int n_layer = (int)f->hp.n_layer, cpu = f->n_dev - 1;
    for (int l = 0; l < n_layer; l++) pl->layer_dev[l] = cpu;
    pl->output_dev = cpu;
    int taken = 0;
    for (int d = 0; d < cpu && taken < n_layer; d++) {
        if (f->budget[d] == 0) continue;
        const int end = n_layer - taken, rem = end;
        set_layers(f, pl, end, rem, rem, d);
        if (taken == 0) {
            pl->output_dev = d; /* with the last layer, when everything fits */
            CLLM_TRY(probe(f, pl, r));
            if (fits(f, r, d)) break;
            pl->output_dev = cpu;
        }
        CLLM_TRY(probe(f, pl, r));
        if (fits(f, r, d)) {
            taken += rem;
            continue;
        }
        /* fewer layers: estimate from this probe, then step to the largest that fits */
        const size_t fixed = r->bytes[d][CLLM_MEM_COMPUTE] + r->bytes[d][CLLM_MEM_WORKSPACE];
        const size_t per = (r->bytes[d][CLLM_MEM_WEIGHTS] + r->bytes[d][CLLM_MEM_STATE]) /
                           (size_t)CLLM_MAX(rem, 1);
        int k = fixed >= f->budget[d] || per == 0
                    ? 0
                    : (int)CLLM_MIN((f->budget[d] - fixed) / per, (size_t)(rem - 1));
        int best = 0;
        for (;;) {
            if (k == 0) break;
            set_layers(f, pl, end, rem, k, d);
            CLLM_TRY(probe(f, pl, r));
            if (fits(f, r, d)) {
                best = k;
                if (k + 1 >= rem) break;
                set_layers(f, pl, end, rem, k + 1, d);
                CLLM_TRY(probe(f, pl, r));
                if (!fits(f, r, d)) break;
                best = ++k;
                continue;
            }
            if (best) break;
            k--;
        }
        set_layers(f, pl, end, rem, best, d);
        taken += best; /* the next device takes the layers before these */
    }
    return probe(f, pl, r);
}

/* ---- the plan ---------------------------------------------------------- */

static void fit_ctx_free(fit_ctx *f) {
    for (int d = 0; d < CLLM_SCHED_MAX_BACKENDS; d++) cllm_backend_free(f->backends[d]);
    free_kv(f);
    cllm_weights_free(f->w);
    free(f->group);
}

void cllm_plan_free(cllm_plan *plan) {
    if (!plan) return;
    free(plan->layer_device);
    free(plan->tensors);
    cllm_weights_free(plan->weights);
    cllm_context_free(plan->kv_ctx);
    free(plan);
}

size_t cllm_plan_device_total(const cllm_plan *plan, int i) {
    size_t n = 0;
    for (int k = 0; k < CLLM_MEM_COUNT; k++) n += plan->devices[i].bytes[k];
    return n;
}

static cllm_status short_error(fit_ctx *f, placement *pl, const probe_result *r) {
    const int cpu = f->n_dev - 1;
    char need[32], have[32], shortb[32], w[32];
    const size_t total = total_of(r, cpu);
    cllm_format_size(total, need, sizeof(need));
    cllm_format_size(f->budget[cpu], have, sizeof(have));
    cllm_format_size(total - f->budget[cpu], shortb, sizeof(shortb));
    const int64_t n_ctx = f->n_ctx;
    /* the largest context that fits, by bisection (each step a placement) */
    int64_t lo = 0, hi = n_ctx;
    probe_result rr;
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        cllm_status st = make_kv(f, mid);
        if (st == CLLM_OK) st = place(f, pl, &rr);
        if (st != CLLM_OK) return st;
        if (fits(f, &rr, cpu)) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    char hint[160];
    if (lo > 0) {
        snprintf(hint, sizeof(hint), "the largest context that fits these budgets is %lld",
                 (long long)lo);
    } else {
        snprintf(hint, sizeof(hint), "not even a context of 1 fits (weights on cpu alone: %s)",
                 cllm_format_size(r->bytes[cpu][CLLM_MEM_WEIGHTS], w, sizeof(w)));
    }
    return cllm_error(CLLM_ERR_TOO_LARGE,
                      "plan: %s needs %s (%zu bytes) for a context of %lld but its budget is %s "
                      "(%zu bytes): %zu bytes (%s) short; %s",
                      cllm_device_name(f->devs[cpu]), need, total, (long long)n_ctx, have,
                      f->budget[cpu], total - f->budget[cpu], shortb, hint);
}

cllm_status cllm_plan_new(const cllm_gguf *g, const cllm_plan_params *params, cllm_plan **out) {
    const double t0 = now_ms();
    fit_ctx f = {.g = g, .p = params ? *params : cllm_plan_default_params()};
    placement pl = {0};
    cllm_plan *plan = NULL;
    cllm_status st;
    const char *arch_name = NULL;
    if ((st = cllm_gguf_get_str(g, "general.architecture", &arch_name)) != CLLM_OK) goto fail;
    f.arch = cllm_arch_find(arch_name);
    if (!f.arch) {
        st = cllm_error(CLLM_ERR_UNSUPPORTED, "%s: architecture \"%s\" is not supported",
                        cllm_gguf_name(g), arch_name);
        goto fail;
    }
    if ((st = f.arch->load_hparams(g, &f.hp)) != CLLM_OK) goto fail;
    if (f.p.n_ctx == 0) f.p.n_ctx = CLLM_MIN(f.hp.n_ctx_train, 4096);
    if (f.p.n_ctx < 1 || f.p.n_ctx > (1 << 24) || f.p.n_batch < 1 || f.p.n_sessions < 1 ||
        f.p.n_sessions > 4096 || (f.p.kv_type != CLLM_TYPE_F16 && f.p.kv_type != CLLM_TYPE_F32)) {
        st = cllm_error(CLLM_ERR_INVALID_ARG,
                        "plan: context %lld, batch %lld, %d sessions, KV type %s: out of range",
                        (long long)f.p.n_ctx, (long long)f.p.n_batch, f.p.n_sessions,
                        cllm_type_name(f.p.kv_type));
        goto fail;
    }
    if (f.hp.learned_pos && f.p.n_ctx > f.hp.n_ctx_train) {
        st = cllm_error(CLLM_ERR_INVALID_ARG, "plan: context %lld exceeds the %lld positions",
                        (long long)f.p.n_ctx, (long long)f.hp.n_ctx_train);
        goto fail;
    }
    if ((st = find_devices(&f)) != CLLM_OK) goto fail;
    if ((st = cllm_weights_new(g, f.arch, &f.hp, &f.w)) != CLLM_OK) goto fail;
    const int n_w = cllm_context_n_tensors(f.w->ctx), n_layer = (int)f.hp.n_layer;
    f.group = malloc((size_t)n_w * sizeof(int));
    pl.layer_dev = malloc((size_t)n_layer * sizeof(int));
    plan = calloc(1, sizeof(*plan));
    if (!f.group || !pl.layer_dev || !plan) {
        st = cllm_error(CLLM_ERR_NOMEM, "plan: out of host memory");
        goto fail;
    }
    for (int i = 0; i < n_w; i++) {
        f.group[i] = cllm_fit_weight_group(cllm_context_tensor(f.w->ctx, i)->name, n_layer);
    }
    probe_result r;
    if ((st = make_kv(&f, f.p.n_ctx)) != CLLM_OK) goto fail;
    if ((st = place(&f, &pl, &r)) != CLLM_OK) goto fail;
    if (!fits(&f, &r, f.n_dev - 1)) {
        st = short_error(&f, &pl, &r);
        goto fail;
    }

    /* the plan: devices, layer map, tensors */
    snprintf(plan->model, sizeof(plan->model), "%s", cllm_gguf_name(g));
    plan->hp = f.hp;
    plan->n_ctx = f.n_ctx;
    plan->n_batch = f.n_batch;
    plan->n_sessions = f.p.n_sessions;
    plan->kv_type = f.p.kv_type;
    plan->use_mmap = f.p.use_mmap;
    plan->n_devices = f.n_dev;
    for (int d = 0; d < f.n_dev; d++) {
        cllm_plan_device *fd = &plan->devices[d];
        fd->dev = f.devs[d];
        fd->name = cllm_device_name(f.devs[d]);
        fd->budget = f.budget[d];
        fd->budget_given = f.given[d];
        memcpy(fd->bytes, r.bytes[d], sizeof(fd->bytes));
    }
    for (int l = 0; l < n_layer; l++) plan->devices[pl.layer_dev[l]].n_layers++;
    plan->layer_device = pl.layer_dev;
    pl.layer_dev = NULL;
    plan->output_device = pl.output_dev;
    plan->input_device = f.n_dev - 1;
    const int n_kv = cllm_context_n_tensors(f.kv_ctx);
    plan->tensors = calloc((size_t)(n_w + n_kv), sizeof(*plan->tensors));
    if (!plan->tensors) {
        st = cllm_error(CLLM_ERR_NOMEM, "plan: out of host memory");
        goto fail;
    }
    for (int i = 0; i < n_w; i++) {
        const cllm_tensor *t = cllm_context_tensor(f.w->ctx, i);
        placement fp = {.layer_dev = plan->layer_device, .output_dev = plan->output_device};
        const int d = weight_device(&f, &fp, i);
        plan->tensors[plan->n_tensors++] = (cllm_plan_tensor){
            .t = t,
            .device = d,
            .bytes = cllm_buffer_type_alloc_size(cllm_device_buffer_type(f.devs[d]), t)};
    }
    for (int i = 0; i < n_kv; i++) {
        const cllm_tensor *t = cllm_context_tensor(f.kv_ctx, i);
        const int d = plan->layer_device[i / 2];
        plan->tensors[plan->n_tensors++] = (cllm_plan_tensor){
            .t = t,
            .device = d,
            .bytes = cllm_buffer_type_alloc_size(cllm_device_buffer_type(f.devs[d]), t),
            .state = true};
    }
    plan->weights = f.w;
    f.w = NULL;
    plan->kv_ctx = f.kv_ctx;
    f.kv_ctx = NULL;
    plan->n_probes = f.n_probes;
    fit_ctx_free(&f);
    plan->plan_ms = now_ms() - t0;
    *out = plan;
    return CLLM_OK;
fail:
    free(pl.layer_dev);
    cllm_plan_free(plan);
    fit_ctx_free(&f);
    return st;
}

cllm_status cllm_plan_file(const char *path, const cllm_plan_params *p, cllm_plan **out) {
    cllm_gguf *g = NULL;
    CLLM_TRY(cllm_gguf_open(path, &g));
    const cllm_status st = cllm_plan_new(g, p, out);
    cllm_gguf_free(g);
    return st;
}

/* ---- printing ---------------------------------------------------------- */

/* "0-15 cpu, 16-31 test0" */
static void layer_ranges(const cllm_plan *plan, FILE *f, bool json) {
    const int n = (int)plan->hp.n_layer;
    bool first = true;
    for (int l = 0; l < n;) {
        int e = l;
        while (e + 1 < n && plan->layer_device[e + 1] == plan->layer_device[l]) e++;
        const char *name = plan->devices[plan->layer_device[l]].name;
        if (json) {
            fprintf(f, "%s{\"first\": %d, \"last\": %d, \"device\": \"%s\"}", first ? "" : ", ", l,
                    e, name);
        } else if (l == e) {
            fprintf(f, "%s%d %s", first ? "" : ", ", l, name);
        } else {
            fprintf(f, "%s%d-%d %s", first ? "" : ", ", l, e, name);
        }
        first = false;
        l = e + 1;
    }
}

static void shape_str(const cllm_tensor *t, char *buf, size_t size) {
    cllm_shape_str(t, buf, size);
}

void cllm_plan_print(const cllm_plan *plan, FILE *f, bool verbose) {
    char a[32], b[32], c[32], d[32], e[32], g[32];
    fprintf(f, "plan for %s: %s, %lld layers, context %lld, batch %lld, %d session%s, KV %s\n\n",
            plan->model, plan->hp.arch, (long long)plan->hp.n_layer, (long long)plan->n_ctx,
            (long long)plan->n_batch, plan->n_sessions, plan->n_sessions == 1 ? "" : "s",
            cllm_type_name(plan->kv_type));
    fprintf(f, "  %-10s %6s %11s %11s %11s %11s %11s %11s\n", "device", "layers", "weights",
            "state", "compute", "workspace", "total", "budget");
    for (int i = 0; i < plan->n_devices; i++) {
        const cllm_plan_device *fd = &plan->devices[i];
        fprintf(f, "  %-10s %6d %11s %11s %11s %11s %11s %11s%s\n", fd->name, fd->n_layers,
                cllm_format_size(fd->bytes[CLLM_MEM_WEIGHTS], a, sizeof(a)),
                cllm_format_size(fd->bytes[CLLM_MEM_STATE], b, sizeof(b)),
                cllm_format_size(fd->bytes[CLLM_MEM_COMPUTE], c, sizeof(c)),
                cllm_format_size(fd->bytes[CLLM_MEM_WORKSPACE], d, sizeof(d)),
                cllm_format_size(cllm_plan_device_total(plan, i), e, sizeof(e)),
                cllm_format_size(fd->budget, g, sizeof(g)),
                fd->budget_given ? " (--mem)" : " (free)");
    }
    /* W weights, S state, C compute, w workspace, . unused: 50 columns per budget */
    fprintf(f, "\n  budget use (W weights, S state, C compute, w workspace, . free):\n");
    for (int i = 0; i < plan->n_devices; i++) {
        const cllm_plan_device *fd = &plan->devices[i];
        enum { WIDTH = 50 };
        char bar[WIDTH + 1];
        int pos = 0;
        static const char k_marks[CLLM_MEM_COUNT] = {'W', 'S', 'C', 'w'};
        size_t acc = 0;
        for (int k = 0; k < CLLM_MEM_COUNT; k++) {
            acc += fd->bytes[k];
            const double frac = fd->budget ? (double)acc / (double)fd->budget : 1.0;
            int upto = (int)(frac * WIDTH + 0.5);
            if (fd->bytes[k] && upto == pos && pos < WIDTH) upto = pos + 1; /* visible */
            while (pos < upto && pos < WIDTH) bar[pos++] = k_marks[k];
        }
        while (pos < WIDTH) bar[pos++] = '.';
        bar[WIDTH] = '\0';
        const double pct =
            fd->budget ? 100.0 * (double)cllm_plan_device_total(plan, i) / (double)fd->budget : 0;
        fprintf(f, "  %-10s [%s] %5.1f%%\n", fd->name, bar, pct);
    }
    if (plan->use_mmap) {
        fprintf(f, "\n  cpu weights: the whole file is mapped (--no-mmap: only the cpu's layers)");
    }
    fprintf(f, "\n  layers: ");
    layer_ranges(plan, f, false);
    fprintf(f, "\n  input (token embeddings): %s; output: %s\n",
            plan->devices[plan->input_device].name, plan->devices[plan->output_device].name);
    if (verbose) {
        fprintf(f, "\n  %-32s %-6s %-24s %12s  %s\n", "tensor", "type", "shape", "bytes", "device");
        for (int i = 0; i < plan->n_tensors; i++) {
            const cllm_plan_tensor *ft = &plan->tensors[i];
            char shape[64];
            shape_str(ft->t, shape, sizeof(shape));
            fprintf(f, "  %-32s %-6s %-24s %12zu  %s%s\n", ft->t->name, cllm_type_name(ft->t->type),
                    shape, ft->bytes, plan->devices[ft->device].name, ft->state ? " (state)" : "");
        }
    }
    fprintf(f, "\n  planned in %.1f ms (%d probes)\n", plan->plan_ms, plan->n_probes);
}

void cllm_plan_print_json(const cllm_plan *plan, FILE *f, bool verbose) {
    fprintf(f, "{\"model\": \"");
    for (const char *p = plan->model; *p; p++) {
        if (*p == '"' || *p == '\\') fputc('\\', f);
        if ((unsigned char)*p >= 0x20) fputc(*p, f);
    }
    fprintf(f,
            "\", \"arch\": \"%s\", \"n_layer\": %lld, \"n_ctx\": %lld, \"n_batch\": %lld, "
            "\"n_sessions\": %d, \"kv_type\": \"%s\",\n \"devices\": [",
            plan->hp.arch, (long long)plan->hp.n_layer, (long long)plan->n_ctx,
            (long long)plan->n_batch, plan->n_sessions, cllm_type_name(plan->kv_type));
    for (int i = 0; i < plan->n_devices; i++) {
        const cllm_plan_device *fd = &plan->devices[i];
        fprintf(f,
                "%s\n  {\"name\": \"%s\", \"kind\": \"%s\", \"layers\": %d, \"weights\": %zu, "
                "\"state\": %zu, \"compute\": %zu, \"workspace\": %zu, \"total\": %zu, "
                "\"budget\": %zu, \"budget_given\": %s}",
                i ? "," : "", fd->name, cllm_device_kind_str(cllm_device_kind_of(fd->dev)),
                fd->n_layers, fd->bytes[CLLM_MEM_WEIGHTS], fd->bytes[CLLM_MEM_STATE],
                fd->bytes[CLLM_MEM_COMPUTE], fd->bytes[CLLM_MEM_WORKSPACE],
                cllm_plan_device_total(plan, i), fd->budget, fd->budget_given ? "true" : "false");
    }
    fprintf(f, "],\n \"layers\": [");
    layer_ranges(plan, f, true);
    fprintf(f, "],\n \"input\": \"%s\", \"output\": \"%s\", \"plan_ms\": %.3f, \"probes\": %d",
            plan->devices[plan->input_device].name, plan->devices[plan->output_device].name,
            plan->plan_ms, plan->n_probes);
    if (verbose) {
        fprintf(f, ",\n \"tensors\": [");
        for (int i = 0; i < plan->n_tensors; i++) {
            const cllm_plan_tensor *ft = &plan->tensors[i];
            fprintf(f,
                    "%s\n  {\"name\": \"%s\", \"type\": \"%s\", \"bytes\": %zu, \"device\": "
                    "\"%s\", \"kind\": \"%s\"}",
                    i ? "," : "", ft->t->name, cllm_type_name(ft->t->type), ft->bytes,
                    plan->devices[ft->device].name, ft->state ? "state" : "weights");
        }
        fprintf(f, "]");
    }
    fprintf(f, "}\n");
}
