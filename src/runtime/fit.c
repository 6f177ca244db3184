/* The fit planner (fit.h): placement of layers across devices within their
 * budgets, from metadata and measure-mode probes. */
#include "core/hostmem.h"
#include "runtime/fit.h"
#include "runtime/instance.h"
#include "backend/backend.h"
#include "runtime/stream.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct fit_ctx {
    const cllm_gguf *g;
    const cllm_arch *arch;
    cllm_hparams hp;
    cllm_weights *w;
    cllm_plan_params p;
    cllm_shape shape; /* of the context being probed */

    cllm_placement pl; /* the devices (the CPU last) and the placement probed */
    size_t budget[CLLM_PLACE_MAX_DEVICES];
    bool given[CLLM_PLACE_MAX_DEVICES];
    cllm_backend *backends[CLLM_PLACE_MAX_DEVICES]; /* made on first use, kept across probes */

    int n_probes;
} fit_ctx;

typedef struct probe_result {
    size_t bytes[CLLM_PLACE_MAX_DEVICES][CLLM_MEM_COUNT];
    size_t ring_bytes, slot_bytes, stream_bytes; /* with streamed layers */
    size_t stream_tensor_bytes;                  /* the streamed weights' own bytes */
    uint64_t stream_lo, stream_hi;               /* the file bytes they span */
    int n_slots;
} probe_result;

/* ---- parameters -------------------------------------------------------- */

cllm_plan_params cllm_plan_default_params(void) {
    return (cllm_plan_params){.n_ctx = 0,
                              .n_batch = 512,
                              .n_sessions = 1,
                              .n_seq = 1,
                              .type_k = CLLM_TYPE_F16,
                              .type_v = CLLM_TYPE_F16,
                              .n_threads = 0,
                              .use_mmap = true,
                              .stream_slots = 2,
                              .read_bw = 0};
}

cllm_status cllm_plan_add_budget(cllm_plan_params *p, const char *device, size_t bytes) {
    if (!p || !device) return CLLM_NULL_ARG("params or device");
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
    if (!p || !arg) return CLLM_NULL_ARG("params or arg");
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

/* ---- set-up ------------------------------------------------------------ */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static cllm_status find_devices(fit_ctx *f) {
    CLLM_TRY(cllm_placement_init_devices(&f->pl, (int)f->hp.n_layer));
    for (int i = 0; i < f->pl.n_devices; i++) {
        size_t fr = 0, tot = 0;
        cllm_device_memory(f->pl.devices[i], &fr, &tot);
        cllm_device_props props;
        cllm_device_get_props(f->pl.devices[i], &props);
        f->budget[i] = props.opt_in ? 0 : fr; /* until a budget names it */
    }
    for (int b = 0; b < f->p.n_budgets; b++) {
        int found = -1;
        for (int i = 0; i < f->pl.n_devices && found < 0; i++) {
            if (strcmp(cllm_device_name(f->pl.devices[i]), f->p.budgets[b].device) == 0) found = i;
        }
        if (found < 0) {
            char names[256] = "";
            for (int i = 0; i < f->pl.n_devices; i++) {
                const size_t len = strlen(names);
                snprintf(names + len, sizeof(names) - len, "%s%s", i ? ", " : "",
                         cllm_device_name(f->pl.devices[i]));
            }
            return cllm_error(CLLM_ERR_INVALID_ARG, "--mem: unknown device \"%s\" (devices: %s)",
                              f->p.budgets[b].device, names);
        }
        f->budget[found] = f->p.budgets[b].bytes;
        f->given[found] = true;
    }
    return CLLM_OK;
}

/* The session shape for a context of n_ctx (the rest from the parameters). */
static cllm_status set_ctx(fit_ctx *f, int64_t n_ctx) {
    const cllm_shape_params sp = {.n_ctx = n_ctx,
                                  .n_batch = f->p.n_batch,
                                  .type_k = f->p.type_k,
                                  .type_v = f->p.type_v,
                                  .n_threads = f->p.n_threads,
                                  .n_seq = f->p.n_seq,
                                  .embeddings = f->p.embeddings};
    return cllm_shape_resolve(&f->hp, &sp, "plan", &f->shape);
}

/* ---- probes ------------------------------------------------------------ */

static void unplace(cllm_context *ctx) {
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        cllm_tensor *t = cllm_context_tensor(ctx, i);
        t->data = NULL;
        t->buffer = NULL;
    }
}

/* Measures the current placement f->pl: bytes per device and kind (state,
 * compute and workspace x n_sessions), with the code sessions allocate with. */
static cllm_status probe(fit_ctx *f, probe_result *r) {
    f->n_probes++;
    memset(r, 0, sizeof(*r));
    const cllm_placement *pl = &f->pl;
    const int cpu = cllm_placement_cpu(pl);
    size_t wbytes[CLLM_PLACE_MAX_DEVICES];
    cllm_buffer *wbufs[CLLM_PLACE_MAX_DEVICES] = {0};
    cllm_instance in = {0};
    cllm_stream_layout lay = {0};
    cllm_buffer *ring = NULL;
    cllm_status st = CLLM_OK;
    if ((st = cllm_place_weights(pl, f->w, wbytes, NULL)) != CLLM_OK) goto done;
    for (int d = 0; d < pl->n_devices; d++) {
        wbufs[d] = cllm_buffer_new_measure(cllm_placement_buft(pl, d), wbytes[d]);
        if (!wbufs[d]) {
            st = cllm_error(CLLM_ERR_NOMEM, "plan: out of host memory");
            goto done;
        }
    }
    (void)cllm_place_weights(pl, f->w, wbytes, wbufs); /* checked above */
    if (pl->streamed) {
        /* the streamed layers in a measure buffer of the ring: nodes that
         * read them are scheduled as on any CPU weight */
        if ((st = cllm_stream_layout_init(&lay, f->g, f->w, pl, f->p.stream_slots)) != CLLM_OK) {
            goto done;
        }
        cllm_buffer_type *host = cllm_device_host_ptr_buffer_type(pl->devices[cpu]);
        if (!host) {
            st = cllm_error(CLLM_ERR_UNSUPPORTED,
                            "plan: %s cannot compute from a ring in host "
                            "memory: no layer can be streamed",
                            cllm_device_name(pl->devices[cpu]));
            goto done;
        }
        if (!(ring = cllm_buffer_new_measure(host, lay.ring_bytes))) {
            st = cllm_error(CLLM_ERR_NOMEM, "plan: out of host memory");
            goto done;
        }
        cllm_stream_place(&lay, f->w, ring);
    }
    for (int d = 0; d < pl->n_devices; d++) {
        if (f->backends[d]) continue;
        /* a device takes part when it holds something (the CPU always); its
         * backend is made on first use */
        bool holds = d == cpu || wbytes[d];
        for (int l = 0; l < pl->n_layer && !holds; l++) holds = pl->layer_device[l] == d;
        if (!holds) continue;
        const cllm_backend_params bp = {.n_threads = f->shape.n_threads};
        st = cllm_device_init_backend(pl->devices[d], &bp, &f->backends[d]);
        if (st != CLLM_OK) goto done;
    }
    const cllm_instance_args ia = {.arch = f->arch,
                                   .hp = &f->hp,
                                   .w = f->w,
                                   .pl = pl,
                                   .shape = f->shape,
                                   .measure = true,
                                   .backends = f->backends};
    if ((st = cllm_instance_init(&in, &ia)) != CLLM_OK) goto done;
    const size_t ns = (size_t)f->p.n_sessions;
    for (int d = 0; d < pl->n_devices; d++) {
        r->bytes[d][CLLM_MEM_WEIGHTS] = d == cpu && f->p.use_mmap
                                            ? cllm_place_mapped_bytes(f->g) /* runtime/model.c */
                                            : in.bytes[d][CLLM_MEM_WEIGHTS];
        for (int k = CLLM_MEM_STATE; k < CLLM_MEM_COUNT; k++) r->bytes[d][k] = in.bytes[d][k] * ns;
    }
    r->bytes[cpu][CLLM_MEM_WEIGHTS] += lay.ring_bytes; /* the ring is weights memory */
    r->ring_bytes = lay.ring_bytes;
    r->slot_bytes = lay.slot_bytes;
    r->n_slots = lay.n_slots;
    r->stream_bytes = lay.read_bytes;
    r->stream_tensor_bytes = lay.tensor_bytes;
    for (int i = 0; i < lay.n_runs; i++) {
        const cllm_stream_run *run = &lay.runs[i];
        r->stream_lo = i ? CLLM_MIN(r->stream_lo, run->file_off) : run->file_off;
        r->stream_hi = CLLM_MAX(r->stream_hi, run->file_off + run->len);
    }
done:
    cllm_stream_layout_free(&lay);
    cllm_buffer_free(ring);
    cllm_instance_free(&in);
    unplace(f->w->ctx);
    for (int d = 0; d < CLLM_PLACE_MAX_DEVICES; d++) cllm_buffer_free(wbufs[d]);
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

/* Layers [end - k, end) go to d, the rest of the r before end to the CPU. */
static void set_layers(fit_ctx *f, int end, int r, int k, int d) {
    const int cpu = cllm_placement_cpu(&f->pl);
    for (int l = end - r; l < end; l++) f->pl.layer_device[l] = l >= end - k ? d : cpu;
}

/* The placement for the current shape (f->shape): accelerators take layers
 * from the end as long as they fit; the CPU the rest. */
static cllm_status place(fit_ctx *f, probe_result *r) {
    cllm_placement *pl = &f->pl;
    const int n_layer = (int)f->hp.n_layer, cpu = cllm_placement_cpu(pl);
    for (int l = 0; l < n_layer; l++) pl->layer_device[l] = cpu;
    pl->output_device = cpu;
    int taken = 0;
    for (int d = 0; d < cpu && taken < n_layer; d++) {
        if (f->budget[d] == 0) continue;
        const int end = n_layer - taken, rem = end;
        set_layers(f, end, rem, rem, d);
        if (taken == 0) {
            pl->output_device = d; /* with the last layer, when everything fits */
            CLLM_TRY(probe(f, r));
            if (fits(f, r, d)) break;
            pl->output_device = cpu;
        }
        CLLM_TRY(probe(f, r));
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
            set_layers(f, end, rem, k, d);
            CLLM_TRY(probe(f, r));
            if (fits(f, r, d)) {
                best = k;
                if (k + 1 >= rem) break;
                set_layers(f, end, rem, k + 1, d);
                CLLM_TRY(probe(f, r));
                if (!fits(f, r, d)) break;
                best = ++k;
                continue;
            }
            if (best) break;
            k--;
        }
        set_layers(f, end, rem, best, d);
        taken += best; /* the next device takes the layers before these */
    }
    return probe(f, r);
}

/* ---- streaming ----------------------------------------------------------- */

/*
 * Streaming in part. Whole layers waste the budget: the ring holds K times
 * the largest streamed layer, and what the resident layers leave over is
 * less than a layer, unused. A streamed layer may instead keep some of its
 * weights resident and stream only the rest, which is all its slot then
 * holds. Every byte of weights is either resident or streamed, so
 *
 *     streamed per token = weights - (budget left to weights) + ring + slack
 *
 * (the ring K x the largest slot, the slack the budget left unused): the
 * fewer bytes a slot holds, and the closer the plan comes to the budget,
 * the fewer bytes are read per token. For a cap S, each of the first n CPU
 * layers streams the largest of its weights that fit within S together
 * (largest first) and keeps the others resident, n the fewest that fit the
 * budget; the last of them streams only what the budget needs (a smaller
 * cap). The search tries the caps that the layers' weights make (each
 * weight's size, and the sums of each layer's largest ones) and keeps the
 * split that reads the fewest bytes. Candidates are laid out exactly
 * (cllm_place_weights and the ring's layout; the state, compute and
 * workspace do not depend on which weights are streamed, and no probe is
 * needed); the split chosen is probed as every plan is, and kept only when
 * it fits and reads fewer bytes than whole layers. CLLM_STREAM_SPLIT=0 in
 * the environment streams whole layers only (for comparisons).
 */

#define SPLIT_MAX_CAPS 48

typedef struct split_ctx {
    int m;        /* the CPU's layers 0 .. m-1 */
    int *first;   /* [m + 1]: layer l's weights are idx[first[l] .. first[l + 1]) */
    int *idx;     /* weight indices, each layer's largest first */
    size_t *size; /* their bytes in the file */
    size_t *caps; /* candidate caps, ascending */
    int n_caps;
    size_t wbudget; /* the CPU's budget less its state, compute and workspace */
} split_ctx;

typedef struct split_cost {
    size_t weights; /* the CPU's weights with the ring */
    size_t read;    /* bytes read per pass */
    int n_str;      /* streamed layers */
} split_cost;

static void split_ctx_free(split_ctx *sc) {
    cllm_free(sc->first);
    cllm_free(sc->idx);
    cllm_free(sc->size);
    cllm_free(sc->caps);
}

static bool split_enabled(void) {
    const char *e = getenv("CLLM_STREAM_SPLIT");
    return !e || strcmp(e, "0") != 0;
}

typedef struct wsize {
    int i;
    size_t size;
} wsize;

static int wsize_cmp(const void *a, const void *b) {
    const wsize *x = a, *y = b;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i; /* creation order among equals */
}

static int size_cmp(const void *a, const void *b) {
    const size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

static cllm_status split_ctx_init(fit_ctx *f, int m, split_ctx *sc) {
    memset(sc, 0, sizeof(*sc));
    sc->m = m;
    const int n_w = cllm_context_n_tensors(f->w->ctx);
    wsize *ws = cllm_malloc((size_t)CLLM_MAX(n_w, 1) * sizeof(*ws));
    sc->first = cllm_calloc((size_t)m + 1, sizeof(int));
    sc->idx = cllm_malloc((size_t)CLLM_MAX(n_w, 1) * sizeof(int));
    sc->size = cllm_malloc((size_t)CLLM_MAX(n_w, 1) * sizeof(size_t));
    sc->caps = cllm_malloc((size_t)CLLM_MAX(2 * n_w, 1) * sizeof(size_t));
    if (!ws || !sc->first || !sc->idx || !sc->size || !sc->caps) {
        cllm_free(ws);
        split_ctx_free(sc);
        return cllm_error(CLLM_ERR_NOMEM, "plan: out of host memory");
    }
    int n = 0, n_caps = 0;
    for (int l = 0; l < m; l++) {
        const int at = n;
        for (int i = 0; i < n_w; i++) {
            if (cllm_weights_group(f->w, i) != l) continue;
            const cllm_tensor *t = cllm_context_tensor(f->w->ctx, i);
            const cllm_gguf_tensor_info *ti =
                cllm_gguf_tensor(f->g, cllm_gguf_find_tensor(f->g, t->name));
            ws[n++] = (wsize){i, ti->size};
        }
        qsort(ws + at, (size_t)(n - at), sizeof(*ws), wsize_cmp);
        size_t sum = 0;
        for (int k = at; k < n; k++) {
            sc->idx[k] = ws[k].i;
            sc->size[k] = ws[k].size;
            sum += ws[k].size;
            sc->caps[n_caps++] = ws[k].size;
            sc->caps[n_caps++] = sum;
        }
        sc->first[l + 1] = n;
    }
    cllm_free(ws);
    qsort(sc->caps, (size_t)n_caps, sizeof(size_t), size_cmp);
    int u = 0;
    for (int k = 0; k < n_caps; k++) {
        if (sc->caps[k] && (u == 0 || sc->caps[k] != sc->caps[u - 1])) sc->caps[u++] = sc->caps[k];
    }
    if (u > SPLIT_MAX_CAPS) {
        /* evenly spread, the largest (whole layers) kept */
        for (int k = 0; k < SPLIT_MAX_CAPS; k++) {
            sc->caps[k] = sc->caps[(size_t)k * (size_t)(u - 1) / (SPLIT_MAX_CAPS - 1)];
        }
        u = SPLIT_MAX_CAPS;
    }
    sc->n_caps = u;
    return CLLM_OK;
}

/* Marks layers 0 .. n-1 streamed, each streaming the largest of its weights
 * that fit within cap together (the last layer: within last_cap) and
 * keeping the others resident; a layer none of whose weights fits stays
 * resident. */
static cllm_status split_mark(fit_ctx *f, const split_ctx *sc, size_t cap, int n, size_t last_cap) {
    cllm_placement *pl = &f->pl;
    CLLM_TRY(cllm_placement_set_streamed(pl, 0, 0));
    cllm_placement_clear_kept(pl);
    for (int l = 0; l < n; l++) {
        const size_t c = l == n - 1 ? last_cap : cap;
        size_t sum = 0;
        bool any = false, all = true;
        for (int k = sc->first[l]; k < sc->first[l + 1]; k++) {
            if (sum + sc->size[k] <= c) {
                sum += sc->size[k];
                any = true;
            } else {
                all = false;
            }
        }
        if (!any) continue;
        CLLM_TRY(cllm_placement_set_streamed(pl, l, 1));
        if (all) continue;
        sum = 0;
        for (int k = sc->first[l]; k < sc->first[l + 1]; k++) {
            if (sum + sc->size[k] <= c) {
                sum += sc->size[k];
            } else {
                CLLM_TRY(cllm_placement_set_kept(pl, f->w, sc->idx[k], true));
            }
        }
    }
    return CLLM_OK;
}

/* The CPU's weights and the bytes read per pass of the placement marked,
 * laid out as a probe would (without the probe's graphs). */
static cllm_status split_eval(fit_ctx *f, split_cost *c) {
    const int cpu = cllm_placement_cpu(&f->pl);
    size_t wb[CLLM_PLACE_MAX_DEVICES];
    CLLM_TRY(cllm_place_weights(&f->pl, f->w, wb, NULL));
    cllm_stream_layout lay;
    CLLM_TRY(cllm_stream_layout_init(&lay, f->g, f->w, &f->pl, f->p.stream_slots));
    c->weights = wb[cpu] + lay.ring_bytes;
    c->read = lay.read_bytes;
    c->n_str = lay.n_layers;
    cllm_stream_layout_free(&lay);
    return CLLM_OK;
}

static bool split_better(const split_cost *a, const split_cost *b) {
    return a->read < b->read || (a->read == b->read && a->n_str < b->n_str);
}

/* The split that reads the fewest bytes within sc->wbudget, marked in
 * f->pl; *found false when none fits (the marks are then undefined). */
static cllm_status split_search(fit_ctx *f, const split_ctx *sc, bool *found) {
    *found = false;
    split_cost best = {0}, c;
    size_t best_cap = 0, best_last = 0;
    int best_n = 0;
    for (int ci = 0; ci < sc->n_caps; ci++) {
        const size_t cap = sc->caps[ci];
        CLLM_TRY(split_mark(f, sc, cap, sc->m, cap));
        CLLM_TRY(split_eval(f, &c));
        if (c.n_str == 0 || c.weights > sc->wbudget) continue;
        /* the fewest layers at this cap (0 streamed does not fit: else no
         * layer would be streamed) */
        int lo = 0, hi = sc->m;
        while (hi - lo > 1) {
            const int mid = lo + (hi - lo) / 2;
            CLLM_TRY(split_mark(f, sc, cap, mid, cap));
            CLLM_TRY(split_eval(f, &c));
            if (c.n_str > 0 && c.weights <= sc->wbudget) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        CLLM_TRY(split_mark(f, sc, cap, hi, cap));
        CLLM_TRY(split_eval(f, &c));
        if (c.weights > sc->wbudget) continue; /* (not monotonic after all) */
        split_cost here = c;
        size_t last = cap;
        /* the last layer streams no more than the budget needs */
        for (int cj = 0; cj < ci; cj++) {
            CLLM_TRY(split_mark(f, sc, cap, hi, sc->caps[cj]));
            CLLM_TRY(split_eval(f, &c));
            if (c.n_str > 0 && c.weights <= sc->wbudget && split_better(&c, &here)) {
                here = c;
                last = sc->caps[cj];
            }
        }
        if (!*found || split_better(&here, &best)) {
            *found = true;
            best = here;
            best_cap = cap;
            best_n = hi;
            best_last = last;
        }
    }
    if (*found) CLLM_TRY(split_mark(f, sc, best_cap, best_n, best_last));
    return CLLM_OK;
}

/* The CPU's layers (those place() left it, 0 .. m-1) do not fit: stream the
 * first s of them, the fewest that make the CPU fit (bisection; a probe
 * each), reading the rest; then, unless CLLM_STREAM_SPLIT=0, the split of
 * layers in part that reads the fewest bytes (above), when it reads fewer.
 * *fitted false when nothing fits (r then holds the probe of every layer
 * streamed whole). *whole: the bytes read per pass with whole layers (0
 * when they do not fit). */
static cllm_status stream_fit(fit_ctx *f, probe_result *r, bool *fitted, size_t *whole) {
    cllm_placement *pl = &f->pl;
    const int cpu = cllm_placement_cpu(pl);
    int m = 0;
    while (m < pl->n_layer && pl->layer_device[m] == cpu) m++;
    *fitted = false;
    *whole = 0;
    if (m == 0) return CLLM_OK;
    f->p.use_mmap = false; /* resident weights read: exactly what is counted */
    CLLM_TRY(cllm_placement_set_streamed(pl, 0, 0));
    cllm_placement_clear_kept(pl);
    CLLM_TRY(cllm_placement_set_streamed(pl, 0, m));
    CLLM_TRY(probe(f, r));
    const probe_result all = *r;
    int hi = 0; /* whole layers streamed in the plan that fits, 0 if none */
    if (fits(f, r, cpu)) {
        int lo = 0; /* lo streamed does not fit, hi does */
        hi = m;
        probe_result rr;
        while (hi - lo > 1) {
            const int mid = lo + (hi - lo) / 2;
            CLLM_TRY(cllm_placement_set_streamed(pl, 0, 0));
            CLLM_TRY(cllm_placement_set_streamed(pl, 0, mid));
            CLLM_TRY(probe(f, &rr));
            if (fits(f, &rr, cpu)) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        CLLM_TRY(cllm_placement_set_streamed(pl, 0, 0));
        CLLM_TRY(cllm_placement_set_streamed(pl, 0, hi));
        CLLM_TRY(probe(f, r));
        *fitted = fits(f, r, cpu);
        if (*fitted) *whole = r->stream_bytes;
    }
    const size_t fixed = total_of(&all, cpu) - all.bytes[cpu][CLLM_MEM_WEIGHTS];
    if (!split_enabled() || fixed >= f->budget[cpu]) return CLLM_OK;
    split_ctx sc;
    CLLM_TRY(split_ctx_init(f, m, &sc));
    sc.wbudget = f->budget[cpu] - fixed;
    bool found = false;
    cllm_status st = split_search(f, &sc, &found);
    split_ctx_free(&sc);
    CLLM_TRY(st);
    probe_result rs;
    if (found) CLLM_TRY(probe(f, &rs));
    if (found && fits(f, &rs, cpu) && (!*fitted || rs.stream_bytes < r->stream_bytes)) {
        *r = rs;
        *fitted = true;
        return CLLM_OK;
    }
    /* whole layers after all */
    CLLM_TRY(cllm_placement_set_streamed(pl, 0, 0));
    cllm_placement_clear_kept(pl);
    CLLM_TRY(cllm_placement_set_streamed(pl, 0, hi ? hi : m));
    if (*fitted) return probe(f, r);
    *r = all;
    return CLLM_OK;
}

static cllm_status stream_short_error(fit_ctx *f, const probe_result *r) {
    const int cpu = cllm_placement_cpu(&f->pl);
    char need[32], have[32], ring[32], sb[32], cb[32], wb[32], other[32];
    const size_t total = total_of(r, cpu);
    const size_t rest = r->bytes[cpu][CLLM_MEM_WEIGHTS] - r->ring_bytes;
    return cllm_error(
        CLLM_ERR_TOO_LARGE,
        "plan: %s needs %s (%zu bytes) even with every layer streamed (ring of %d slots %s, other "
        "weights %s, state %s, compute %s, workspace %s) but its budget is %s (%zu bytes): %zu "
        "bytes short; lower the context (-c) or the batch (-b)",
        cllm_device_name(f->pl.devices[cpu]), cllm_format_size(total, need, sizeof(need)), total,
        r->n_slots, cllm_format_size(r->ring_bytes, ring, sizeof(ring)),
        cllm_format_size(rest, other, sizeof(other)),
        cllm_format_size(r->bytes[cpu][CLLM_MEM_STATE], sb, sizeof(sb)),
        cllm_format_size(r->bytes[cpu][CLLM_MEM_COMPUTE], cb, sizeof(cb)),
        cllm_format_size(r->bytes[cpu][CLLM_MEM_WORKSPACE], wb, sizeof(wb)),
        cllm_format_size(f->budget[cpu], have, sizeof(have)), f->budget[cpu],
        total - f->budget[cpu]);
}

/* ---- the plan ---------------------------------------------------------- */

static void fit_ctx_free(fit_ctx *f) {
    for (int d = 0; d < CLLM_PLACE_MAX_DEVICES; d++) cllm_backend_free(f->backends[d]);
    cllm_placement_free(&f->pl);
    cllm_weights_free(f->w);
}

void cllm_plan_free(cllm_plan *plan) {
    if (!plan) return;
    cllm_placement_free(&plan->place);
    cllm_free(plan->tensors);
    cllm_weights_free(plan->weights);
    cllm_kv_cache_free(&plan->kv);
    cllm_free(plan);
}

size_t cllm_plan_device_total(const cllm_plan *plan, int i) {
    size_t n = 0;
    for (int k = 0; k < CLLM_MEM_COUNT; k++) n += plan->devices[i].bytes[k];
    return n;
}

static cllm_status short_error(fit_ctx *f, const probe_result *r) {
    const int cpu = cllm_placement_cpu(&f->pl);
    char need[32], have[32], shortb[32], w[32];
    const size_t total = total_of(r, cpu);
    cllm_format_size(total, need, sizeof(need));
    cllm_format_size(f->budget[cpu], have, sizeof(have));
    cllm_format_size(total - f->budget[cpu], shortb, sizeof(shortb));
    const int64_t n_ctx = f->shape.n_ctx;
    /* the largest context that fits, by bisection (each step a placement) */
    int64_t lo = 0, hi = n_ctx;
    probe_result rr;
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        cllm_status st = set_ctx(f, mid);
        if (st == CLLM_OK) st = place(f, &rr);
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
                      cllm_device_name(f->pl.devices[cpu]), need, total, (long long)n_ctx, have,
                      f->budget[cpu], total - f->budget[cpu], shortb, hint);
}

cllm_status cllm_plan_new(const cllm_gguf *g, const cllm_plan_params *params, cllm_plan **out) {
    if (!g || !out) return CLLM_NULL_ARG("the file or out");
    const double t0 = now_ms();
    fit_ctx f = {.g = g, .p = params ? *params : cllm_plan_default_params()};
    cllm_plan *plan = NULL;
    cllm_status st;
    const char *arch_name = NULL;
    if ((st = cllm_gguf_get_str(g, "general.architecture", &arch_name)) != CLLM_OK) goto fail;
    f.arch = cllm_arch_find(arch_name);
    if (!f.arch) {
        char names[256];
        st = cllm_error(CLLM_ERR_UNSUPPORTED,
                        "%s: architecture \"%s\" is not supported (supported: %s)",
                        cllm_gguf_name(g), arch_name, cllm_arch_names(names, sizeof(names)));
        goto fail;
    }
    if ((st = f.arch->load_hparams(g, &f.hp)) != CLLM_OK) goto fail;
    if (f.p.n_sessions < 1 || f.p.n_sessions > 4096) {
        st = cllm_error(CLLM_ERR_INVALID_ARG, "plan: %d sessions is out of range [1, 4096]",
                        f.p.n_sessions);
        goto fail;
    }
    if ((st = set_ctx(&f, f.p.n_ctx)) != CLLM_OK) goto fail;
    if ((st = cllm_weights_new(g, f.arch, &f.hp, &f.w)) != CLLM_OK) goto fail;
    if ((st = find_devices(&f)) != CLLM_OK) goto fail;
    plan = cllm_calloc(1, sizeof(*plan));
    if (!plan) {
        st = cllm_error(CLLM_ERR_NOMEM, "plan: out of host memory");
        goto fail;
    }
    if (f.p.stream_slots != 0 &&
        (f.p.stream_slots < 2 || f.p.stream_slots > CLLM_STREAM_MAX_SLOTS)) {
        st = cllm_error(CLLM_ERR_INVALID_ARG, "plan: %d stream slots is out of range [2, %d]",
                        f.p.stream_slots, CLLM_STREAM_MAX_SLOTS);
        goto fail;
    }
    probe_result r;
    if ((st = place(&f, &r)) != CLLM_OK) goto fail;
    const int cpu = cllm_placement_cpu(&f.pl);
    if (!fits(&f, &r, cpu) && f.p.stream_slots > 0) {
        bool fitted = false;
        if ((st = stream_fit(&f, &r, &fitted, &plan->stream_bytes_whole)) != CLLM_OK) goto fail;
        if (!fitted) {
            st = stream_short_error(&f, &r);
            goto fail;
        }
    } else if (!fits(&f, &r, cpu)) {
        st = short_error(&f, &r);
        goto fail;
    }

    /* the plan: devices, layer map, tensors */
    snprintf(plan->model, sizeof(plan->model), "%s", cllm_gguf_name(g));
    plan->hp = f.hp;
    plan->shape = f.shape;
    plan->n_ctx = f.shape.n_ctx;
    plan->n_batch = f.shape.n_batch;
    plan->n_sessions = f.p.n_sessions;
    plan->type_k = f.shape.type_k, plan->type_v = f.shape.type_v;
    plan->use_mmap = f.p.use_mmap;
    plan->n_devices = f.pl.n_devices;
    for (int d = 0; d < f.pl.n_devices; d++) {
        cllm_plan_device *fd = &plan->devices[d];
        fd->dev = f.pl.devices[d];
        fd->name = cllm_device_name(f.pl.devices[d]);
        fd->budget = f.budget[d];
        fd->budget_given = f.given[d];
        memcpy(fd->bytes, r.bytes[d], sizeof(fd->bytes));
    }
    plan->n_streamed = cllm_placement_n_streamed(&f.pl);
    if (plan->n_streamed) {
        plan->use_mmap = false;
        plan->stream_slots = r.n_slots;
        plan->slot_bytes = r.slot_bytes;
        plan->ring_bytes = r.ring_bytes;
        plan->stream_bytes = r.stream_bytes;
        plan->stream_file_lo = r.stream_lo;
        plan->stream_file_hi = r.stream_hi;
        for (int l = 0; l < f.pl.n_layer; l++) {
            plan->n_partial += cllm_placement_layer_partial(&f.pl, f.w, l);
        }
        plan->read_bw = f.p.read_bw;
        if (plan->read_bw <= 0) {
            /* best effort: a plan from metadata in memory has no file to probe */
            double bw = 0;
            bool direct = false;
            if (cllm_stream_probe_read_bw(cllm_gguf_name(g), (size_t)256 << 20, plan->slot_bytes,
                                          &bw, &direct) == CLLM_OK) {
                plan->read_bw = bw;
                plan->read_bw_probed = true;
                plan->read_bw_direct = direct;
            }
        }
    }
    plan->place = f.pl; /* moved */
    f.pl.layer_device = NULL;
    f.pl.streamed = NULL;
    f.pl.keep = NULL;
    plan->layer_device = plan->place.layer_device;
    plan->output_device = plan->place.output_device;
    plan->input_device = cpu;
    for (int l = 0; l < plan->place.n_layer; l++) plan->devices[plan->layer_device[l]].n_layers++;
    /* the tensor map: the weights, and one session's KV cache (every
     * sequence's) as sessions make it */
    if ((st = cllm_kv_cache_init(&plan->kv, &f.hp, &f.shape)) != CLLM_OK) goto fail;
    const int n_w = cllm_context_n_tensors(f.w->ctx), n_kv = cllm_context_n_tensors(plan->kv.ctx);
    plan->tensors = cllm_calloc((size_t)(n_w + n_kv), sizeof(*plan->tensors));
    if (!plan->tensors) {
        st = cllm_error(CLLM_ERR_NOMEM, "plan: out of host memory");
        goto fail;
    }
    for (int i = 0; i < n_w; i++) {
        const cllm_tensor *t = cllm_context_tensor(f.w->ctx, i);
        const int d = cllm_placement_weight_device(&plan->place, f.w, i);
        plan->tensors[plan->n_tensors++] = (cllm_plan_tensor){
            .t = t,
            .device = d,
            .bytes = cllm_buffer_type_alloc_size(cllm_placement_buft(&plan->place, d), t),
            .streamed = cllm_placement_weight_streamed(&plan->place, f.w, i)};
        if (d != CLLM_PLACE_NONE) plan->weight_bytes += cllm_nbytes(t);
    }
    plan->resident_bytes = plan->weight_bytes - r.stream_tensor_bytes;
    for (int i = 0; i < n_kv; i++) {
        const cllm_tensor *t = cllm_context_tensor(plan->kv.ctx, i);
        const int d = cllm_place_kv_device(&plan->place, t, i); /* K, V per layer */
        plan->tensors[plan->n_tensors++] = (cllm_plan_tensor){
            .t = t,
            .device = d,
            .bytes = cllm_buffer_type_alloc_size(cllm_placement_buft(&plan->place, d), t),
            .state = true};
    }
    plan->weights = f.w;
    f.w = NULL;
    plan->n_probes = f.n_probes;
    fit_ctx_free(&f);
    plan->plan_ms = now_ms() - t0;
    *out = plan;
    return CLLM_OK;
fail:
    cllm_plan_free(plan);
    fit_ctx_free(&f);
    return st;
}

cllm_status cllm_plan_file(const char *path, const cllm_plan_params *p, cllm_plan **out) {
    if (!path || !out) return CLLM_NULL_ARG("path or out");
    cllm_gguf *g = NULL;
    CLLM_TRY(cllm_gguf_open(path, &g));
    const cllm_status st = cllm_plan_new(g, p, out);
    cllm_gguf_free(g);
    return st;
}

/* ---- printing ---------------------------------------------------------- */

/* Names and paths come from files and the command line: escaped for a
 * terminal, or for the inside of a JSON string (cut to fit buf). */
static const char *esc(const char *str, char *buf, size_t size, bool json) {
    cllm_escape(buf, size, str, strlen(str), json ? CLLM_ESCAPE_JSON : CLLM_ESCAPE_TEXT);
    return buf;
}

/* "0-15 cpu, 16-31 test0" */
static void layer_ranges(const cllm_plan *plan, FILE *f, bool json) {
    const int n = (int)plan->hp.n_layer;
    bool first = true;
    for (int l = 0; l < n;) {
        const unsigned char *str = plan->place.streamed;
        const bool part = cllm_placement_layer_partial(&plan->place, plan->weights, l);
        int e = l;
        while (e + 1 < n && plan->layer_device[e + 1] == plan->layer_device[l] &&
               (!str || str[e + 1] == str[l]) &&
               cllm_placement_layer_partial(&plan->place, plan->weights, e + 1) == part) {
            e++;
        }
        char name[64];
        esc(plan->devices[plan->layer_device[l]].name, name, sizeof(name), json);
        const bool streamed = str && str[l];
        const char *how = part ? " (streamed in part)" : streamed ? " (streamed)" : "";
        if (json) {
            fprintf(f,
                    "%s{\"first\": %d, \"last\": %d, \"device\": \"%s\", \"streamed\": %s, "
                    "\"in_part\": %s}",
                    first ? "" : ", ", l, e, name, streamed ? "true" : "false",
                    part ? "true" : "false");
        } else if (l == e) {
            fprintf(f, "%s%d %s%s", first ? "" : ", ", l, name, how);
        } else {
            fprintf(f, "%s%d-%d %s%s", first ? "" : ", ", l, e, name, how);
        }
        first = false;
        l = e + 1;
    }
}

static void shape_str(const cllm_tensor *t, char *buf, size_t size) {
    cllm_shape_str(t, buf, size);
}

/* Tokens/s of generation that reading the streamed layers allows (each
 * token reads them once), or 0 when the bandwidth is unknown. */
static double stream_bound(const cllm_plan *plan) {
    return plan->read_bw > 0 && plan->stream_bytes ? plan->read_bw / (double)plan->stream_bytes : 0;
}

/* Percent of the weights' bytes held resident. */
static double resident_pct(const cllm_plan *plan) {
    return plan->weight_bytes ? 100.0 * (double)plan->resident_bytes / (double)plan->weight_bytes
                              : 100.0;
}

static void print_stream(const cllm_plan *plan, FILE *f) {
    char a[32], b[32], c[32], d[32];
    char part[64] = "";
    if (plan->n_partial) {
        snprintf(part, sizeof(part), " (%d in part: their other weights resident)",
                 plan->n_partial);
    }
    fprintf(f,
            "\n  streamed: %d of %lld layers%s, read per pass through a ring of %d slots x %s = "
            "%s (counted as cpu weights)\n",
            plan->n_streamed, (long long)plan->hp.n_layer, part, plan->stream_slots,
            cllm_format_size(plan->slot_bytes, a, sizeof(a)),
            cllm_format_size(plan->ring_bytes, b, sizeof(b)));
    fprintf(f, "  resident weights: %s of %s (%.1f%%)\n",
            cllm_format_size(plan->resident_bytes, c, sizeof(c)),
            cllm_format_size(plan->weight_bytes, d, sizeof(d)), resident_pct(plan));
    fprintf(f, "  read per token (and per prompt batch): %s",
            cllm_format_size(plan->stream_bytes, c, sizeof(c)));
    if (plan->n_partial && plan->stream_bytes_whole) {
        fprintf(f, " (whole layers: %s)", cllm_format_size(plan->stream_bytes_whole, d, sizeof(d)));
    }
    if (plan->read_bw > 0) {
        fprintf(f, "; read bandwidth %.0f MB/s (%s) -> generation bound %.2f tokens/s\n",
                plan->read_bw / 1e6,
                plan->read_bw_probed ? (plan->read_bw_direct ? "measured, direct I/O"
                                                             : "measured, page cache dropped")
                                     : "--read-bw",
                stream_bound(plan));
    } else {
        fprintf(f, "; read bandwidth unknown (--read-bw BYTES/s gives it)\n");
    }
}

void cllm_plan_print(const cllm_plan *plan, FILE *f, bool verbose) {
    if (!plan || !f) return;
    char a[32], b[32], c[32], d[32], e[32], g[32];
    char model[4 * sizeof(plan->model)], arch[4 * sizeof(plan->hp.arch)], dev[64];
    char seqs[48] = "";
    if (plan->shape.n_seq > 1) {
        snprintf(seqs, sizeof(seqs), " of %d sequences", plan->shape.n_seq);
    }
    fprintf(f,
            "plan for %s: %s, %lld layers, context %lld, batch %lld, %d session%s%s, KV %s/%s "
            "(K/V)\n\n",
            esc(plan->model, model, sizeof(model), false),
            esc(plan->hp.arch, arch, sizeof(arch), false), (long long)plan->hp.n_layer,
            (long long)plan->n_ctx, (long long)plan->n_batch, plan->n_sessions,
            plan->n_sessions == 1 ? "" : "s", seqs, cllm_type_name(plan->type_k),
            cllm_type_name(plan->type_v));
    if (plan->kv.n_ring < plan->n_ctx) {
        int n_swa = 0;
        for (int64_t l = 0; l < plan->hp.n_layer; l++) n_swa += plan->hp.swa_layer[l];
        fprintf(f,
                "  KV of the %d sliding-window layers (of %lld): the last %lld positions (window "
                "%lld + batch %lld - 1), not %lld\n\n",
                n_swa, (long long)plan->hp.n_layer, (long long)plan->kv.n_ring,
                (long long)plan->hp.n_swa, (long long)plan->n_batch, (long long)plan->n_ctx);
    }
    fprintf(f, "  %-10s %6s %11s %11s %11s %11s %11s %11s\n", "device", "layers", "weights",
            "state", "compute", "workspace", "total", "budget");
    for (int i = 0; i < plan->n_devices; i++) {
        const cllm_plan_device *fd = &plan->devices[i];
        fprintf(f, "  %-10s %6d %11s %11s %11s %11s %11s %11s%s\n",
                esc(fd->name, dev, sizeof(dev), false), fd->n_layers,
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
        fprintf(f, "  %-10s [%s] %5.1f%%\n", esc(fd->name, dev, sizeof(dev), false), bar, pct);
    }
    if (plan->use_mmap) {
        fprintf(f, "\n  cpu weights: the whole file is mapped (--no-mmap: only the cpu's layers)");
    }
    fprintf(f, "\n  layers: ");
    layer_ranges(plan, f, false);
    char dev2[64];
    fprintf(f, "\n  input (token embeddings): %s; output: %s\n",
            esc(plan->devices[plan->input_device].name, dev, sizeof(dev), false),
            esc(plan->devices[plan->output_device].name, dev2, sizeof(dev2), false));
    if (plan->n_streamed) print_stream(plan, f);
    if (verbose) {
        fprintf(f, "\n  %-32s %-6s %-24s %12s  %s\n", "tensor", "type", "shape", "bytes", "device");
        for (int i = 0; i < plan->n_tensors; i++) {
            const cllm_plan_tensor *ft = &plan->tensors[i];
            char shape[64], name[4 * CLLM_GGUF_MAX_NAME + 1];
            shape_str(ft->t, shape, sizeof(shape));
            fprintf(f, "  %-32s %-6s %-24s %12zu  %s%s\n",
                    esc(ft->t->name, name, sizeof(name), false), cllm_type_name(ft->t->type), shape,
                    ft->bytes, esc(plan->devices[ft->device].name, dev, sizeof(dev), false),
                    ft->state      ? " (state)"
                    : ft->streamed ? " (streamed)"
                                   : "");
        }
    }
    fprintf(f, "\n  planned in %.1f ms (%d probes)\n", plan->plan_ms, plan->n_probes);
}

void cllm_plan_print_json(const cllm_plan *plan, FILE *f, bool verbose) {
    if (!plan || !f) return;
    char model[6 * sizeof(plan->model)], arch[6 * sizeof(plan->hp.arch)], dev[64], dev2[64];
    fprintf(f,
            "{\"model\": \"%s\", \"arch\": \"%s\", \"n_layer\": %lld, \"n_ctx\": %lld, "
            "\"n_batch\": %lld, \"n_sessions\": %d, \"n_seq\": %d, \"type_k\": \"%s\", \"type_v\": "
            "\"%s\", "
            "\"kv_ring\": %lld,\n \"devices\": [",
            esc(plan->model, model, sizeof(model), true),
            esc(plan->hp.arch, arch, sizeof(arch), true), (long long)plan->hp.n_layer,
            (long long)plan->n_ctx, (long long)plan->n_batch, plan->n_sessions, plan->shape.n_seq,
            cllm_type_name(plan->type_k), cllm_type_name(plan->type_v), (long long)plan->kv.n_ring);
    for (int i = 0; i < plan->n_devices; i++) {
        const cllm_plan_device *fd = &plan->devices[i];
        fprintf(f,
                "%s\n  {\"name\": \"%s\", \"kind\": \"%s\", \"layers\": %d, \"weights\": %zu, "
                "\"state\": %zu, \"compute\": %zu, \"workspace\": %zu, \"total\": %zu, "
                "\"budget\": %zu, \"budget_given\": %s}",
                i ? "," : "", esc(fd->name, dev, sizeof(dev), true),
                cllm_device_kind_str(cllm_device_kind_of(fd->dev)), fd->n_layers,
                fd->bytes[CLLM_MEM_WEIGHTS], fd->bytes[CLLM_MEM_STATE], fd->bytes[CLLM_MEM_COMPUTE],
                fd->bytes[CLLM_MEM_WORKSPACE], cllm_plan_device_total(plan, i), fd->budget,
                fd->budget_given ? "true" : "false");
    }
    fprintf(f, "],\n \"layers\": [");
    layer_ranges(plan, f, true);
    fprintf(f, "],\n \"input\": \"%s\", \"output\": \"%s\", \"plan_ms\": %.3f, \"probes\": %d",
            esc(plan->devices[plan->input_device].name, dev, sizeof(dev), true),
            esc(plan->devices[plan->output_device].name, dev2, sizeof(dev2), true), plan->plan_ms,
            plan->n_probes);
    if (plan->n_streamed) {
        fprintf(f,
                ",\n \"stream\": {\"layers\": %d, \"layers_in_part\": %d, \"slots\": %d, "
                "\"slot_bytes\": %zu, \"ring_bytes\": %zu, \"bytes_per_token\": %zu, "
                "\"bytes_per_token_whole_layers\": %zu, \"weight_bytes\": %zu, "
                "\"resident_weight_bytes\": %zu, \"resident_fraction\": %.4f, "
                "\"read_bw\": %.0f, \"read_bw_measured\": %s, \"tokens_per_s_bound\": %.4f, "
                "\"file_range\": [%llu, %llu]}",
                plan->n_streamed, plan->n_partial, plan->stream_slots, plan->slot_bytes,
                plan->ring_bytes, plan->stream_bytes, plan->stream_bytes_whole, plan->weight_bytes,
                plan->resident_bytes, resident_pct(plan) / 100.0, plan->read_bw,
                plan->read_bw_probed ? "true" : "false", stream_bound(plan),
                (unsigned long long)plan->stream_file_lo, (unsigned long long)plan->stream_file_hi);
    }
    if (verbose) {
        fprintf(f, ",\n \"tensors\": [");
        for (int i = 0; i < plan->n_tensors; i++) {
            const cllm_plan_tensor *ft = &plan->tensors[i];
            char name[6 * CLLM_GGUF_MAX_NAME + 1];
            fprintf(f,
                    "%s\n  {\"name\": \"%s\", \"type\": \"%s\", \"bytes\": %zu, \"device\": "
                    "\"%s\", \"kind\": \"%s\"}",
                    i ? "," : "", esc(ft->t->name, name, sizeof(name), true),
                    cllm_type_name(ft->t->type), ft->bytes,
                    esc(plan->devices[ft->device].name, dev, sizeof(dev), true),
                    ft->state      ? "state"
                    : ft->streamed ? "streamed"
                                   : "weights");
        }
        fprintf(f, "]");
    }
    fprintf(f, "}\n");
}
