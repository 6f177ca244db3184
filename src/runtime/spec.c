/* Speculative decoding: the parameters, the n-gram lookup and the draft
 * model that draft (cllm.h). The engine (engine.c) verifies the drafts. */
#include "runtime/spec.h"
#include "core/hostmem.h"
#include "runtime/session.h"

#include <string.h>

cllm_spec_params cllm_spec_default_params(void) {
    return (cllm_spec_params){
        .type = CLLM_SPEC_NGRAM, .ngram_max = 4, .ngram_min = 2, .draft_max = 8, .draft_min = 1};
}

cllm_status cllm_spec_params_check(const cllm_spec_params *p) {
    if (!p) return CLLM_NULL_ARG("the speculative decoding parameters");
    if ((unsigned)p->type >= CLLM_SPEC_COUNT) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "spec: type %d is not none, ngram-simple or draft",
                          (int)p->type);
    }
    if (p->type == CLLM_SPEC_DRAFT && !p->draft) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "spec: type draft needs a draft model (cllm_draft_new)");
    }
    if (p->type != CLLM_SPEC_DRAFT && p->draft) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "spec: a draft model with type %s (not draft)",
                          cllm_spec_type_str(p->type));
    }
    if (p->ngram_max < 1 || p->ngram_max > 64) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "spec: ngram_max must be in [1, 64], got %d",
                          p->ngram_max);
    }
    if (p->ngram_min < 1 || p->ngram_min > p->ngram_max) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "spec: ngram_min must be in [1, %d], got %d",
                          p->ngram_max, p->ngram_min);
    }
    if (p->draft_max < 1 || p->draft_max > CLLM_SPEC_MAX_DRAFT) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "spec: draft_max must be in [1, %d], got %d",
                          CLLM_SPEC_MAX_DRAFT, p->draft_max);
    }
    if (p->draft_min < 1 || p->draft_min > p->draft_max) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "spec: draft_min must be in [1, %d], got %d",
                          p->draft_max, p->draft_min);
    }
    return CLLM_OK;
}

const char *cllm_spec_type_str(cllm_spec_type t) {
    switch (t) {
    case CLLM_SPEC_NONE: return "none";
    case CLLM_SPEC_NGRAM: return "ngram-simple";
    case CLLM_SPEC_DRAFT: return "draft";
    default: return "unknown";
    }
}

cllm_status cllm_spec_type_parse(const char *name, cllm_spec_type *out) {
    if (!name || !out) return CLLM_NULL_ARG("name or out");
    if (!strcmp(name, "none")) {
        *out = CLLM_SPEC_NONE;
    } else if (!strcmp(name, "ngram-simple") || !strcmp(name, "ngram")) {
        *out = CLLM_SPEC_NGRAM;
    } else if (!strcmp(name, "draft")) {
        *out = CLLM_SPEC_DRAFT;
    } else {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "spec: unknown type '%s' (choices: none, ngram-simple, draft)", name);
    }
    return CLLM_OK;
}

int cllm_spec_ngram_draft(const cllm_spec_params *p, const int32_t *hist, size_t n, int max,
                          int32_t *draft) {
    if (!p || !hist || !draft || p->type != CLLM_SPEC_NGRAM) return 0;
    if (max > p->draft_max) max = p->draft_max;
    if (max < p->draft_min || max <= 0) return 0;
    for (size_t g = (size_t)p->ngram_max; g >= (size_t)p->ngram_min && g >= 1; g--) {
        if (g >= n) continue; /* an earlier occurrence needs room before the end */
        const int32_t *key = hist + n - g;
        /* the most recent earlier occurrence: a start j < n - g */
        for (size_t j = n - g; j-- > 0;) {
            if (hist[j] != key[0] || memcmp(hist + j, key, g * sizeof(int32_t)) != 0) continue;
            const size_t from = j + g; /* what followed it (<= n - 1) */
            size_t k = n - from;
            if (k > (size_t)max) k = (size_t)max;
            if (k < (size_t)p->draft_min) return 0;
            memcpy(draft, hist + from, k * sizeof(int32_t));
            return (int)k;
        }
    }
    return 0;
}

/* ---- the draft model ----------------------------------------------------- */

struct cllm_draft {
    const cllm_model *target, *model;
    cllm_session *s;
    int n_seq;
    int64_t n_ctx, n_batch;
    int32_t *ids;  /* [n_seq][n_ctx]: the ids each sequence's cache holds */
    size_t *n_ids; /* [n_seq] */
    bool warned;   /* a failed decode was logged */
};

/* CLLM_OK when a and b have the same vocabulary, else why not. */
static cllm_status same_vocab(const cllm_model *a, const cllm_model *b) {
    const int32_t na = cllm_model_n_vocab(a), nb = cllm_model_n_vocab(b);
    if (na != nb) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "draft model: its vocabulary has %d tokens, the target's %d: a draft "
                          "model needs the target's vocabulary",
                          nb, na);
    }
    if (cllm_token_bos(a) != cllm_token_bos(b) || cllm_token_eos(a) != cllm_token_eos(b)) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "draft model: BOS/EOS %d/%d, the target's %d/%d: a draft model needs "
                          "the target's vocabulary",
                          cllm_token_bos(b), cllm_token_eos(b), cllm_token_bos(a),
                          cllm_token_eos(a));
    }
    for (int32_t id = 0; id < na; id++) {
        size_t la = 0, lb = 0;
        const char *pa = cllm_token_to_piece(a, id, true, &la);
        const char *pb = cllm_token_to_piece(b, id, true, &lb);
        if (la != lb || (la && memcmp(pa, pb, la) != 0) ||
            cllm_token_is_eog(a, id) != cllm_token_is_eog(b, id)) {
            return cllm_error(CLLM_ERR_INVALID_ARG,
                              "draft model: token %d is '%.*s', the target's '%.*s': a draft "
                              "model needs the target's vocabulary",
                              id, (int)CLLM_MIN(lb, 40), pb, (int)CLLM_MIN(la, 40), pa);
        }
    }
    return CLLM_OK;
}

cllm_status cllm_draft_new(const cllm_model *target, const cllm_model *draft,
                           const cllm_session_params *params, cllm_draft **out) {
    if (!target || !draft || !out) return CLLM_NULL_ARG("the target, the draft or out");
    CLLM_TRY(same_vocab(target, draft));
    cllm_session *s = NULL;
    CLLM_TRY(cllm_session_new(draft, params, &s));
    cllm_draft *d = cllm_calloc(1, sizeof(*d));
    if (d) {
        d->target = target;
        d->model = draft;
        d->s = s;
        d->n_seq = cllm_session_n_seq(s);
        d->n_ctx = cllm_session_n_ctx(s);
        d->n_batch = cllm_session_n_batch(s);
        d->ids = cllm_malloc((size_t)d->n_seq * (size_t)d->n_ctx * sizeof(int32_t));
        d->n_ids = cllm_calloc((size_t)d->n_seq, sizeof(size_t));
    }
    if (!d || !d->ids || !d->n_ids) {
        cllm_draft_free(d);
        if (!d) cllm_session_free(s);
        return cllm_error(CLLM_ERR_NOMEM, "draft model: out of host memory");
    }
    *out = d;
    return CLLM_OK;
}

void cllm_draft_free(cllm_draft *d) {
    if (!d) return;
    cllm_session_free(d->s);
    cllm_free(d->ids);
    cllm_free(d->n_ids);
    cllm_free(d);
}

cllm_session *cllm_draft_session(cllm_draft *d) { return d ? d->s : NULL; }

cllm_status cllm_draft_fits(const cllm_draft *d, const cllm_model *target, int n_seq) {
    if (target != d->target) CLLM_TRY(same_vocab(target, d->model));
    if (n_seq > d->n_seq) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "draft model: its session has %d sequences, the target's %d: one "
                          "each is needed",
                          d->n_seq, n_seq);
    }
    return CLLM_OK;
}

/* Decodes hist[from, n) into sequence seq of the draft, after what it
 * holds (hist[0, from)): the rows before n_chunked in prompt chunks, the
 * others as items of one token, as the target computed them (so that a
 * model drafting for itself computes the same logits). */
static cllm_status draft_feed(cllm_draft *d, int seq, const int32_t *hist, size_t from, size_t n,
                              size_t n_chunked) {
    int32_t *held = d->ids + (size_t)seq * (size_t)d->n_ctx;
    cllm_seq_tokens items[CLLM_MAX_SEQS];
    const size_t max_items = (size_t)CLLM_MIN(
        CLLM_MIN((int64_t)cllm_session_max_items(d->s), (int64_t)CLLM_MAX_SEQS), d->n_batch);
    for (size_t at = from; at < n;) {
        size_t k;
        if (at < n_chunked) {
            k = (size_t)cllm_session_prompt_chunk(d->n_batch, (int64_t)(n_chunked - at));
            k = CLLM_MIN(k, n - at);
            const cllm_seq_tokens it = {seq, hist + at, (int64_t)k};
            CLLM_TRY(cllm_session_decode_seqs(d->s, &it, 1));
        } else if (n - at <= 4) {
            /* a few tokens one pass each: the one-token step keeps its
             * graph (a pass of several items would plan another) */
            k = 1;
            const cllm_seq_tokens it = {seq, hist + at, 1};
            CLLM_TRY(cllm_session_decode_seqs(d->s, &it, 1));
        } else {
            k = CLLM_MIN(n - at, max_items);
            for (size_t j = 0; j < k; j++) items[j] = (cllm_seq_tokens){seq, hist + at + j, 1};
            CLLM_TRY(cllm_session_decode_items(d->s, items, (int)k, NULL));
        }
        memcpy(held + at, hist + at, k * sizeof(int32_t));
        d->n_ids[seq] = at + k;
        at += k;
    }
    return CLLM_OK;
}

int cllm_draft_propose(cllm_draft *d, int seq, const int32_t *hist, size_t n, size_t n_chunked,
                       int max, int min, int32_t *out, double *ms) {
    const double t0 = cllm_time_ms();
    *ms = 0;
    if (seq < 0 || seq >= d->n_seq || n == 0) return 0;
    /* hist and the draft but its last token fit the context */
    if ((int64_t)n > d->n_ctx) return 0;
    max = (int)CLLM_MIN((int64_t)max, d->n_ctx - (int64_t)n + 1);
    if (max < min || max < 1) return 0;
    int32_t *held = d->ids + (size_t)seq * (size_t)d->n_ctx;
    size_t lcp = 0;
    if ((size_t)cllm_session_seq_n_past(d->s, seq) != d->n_ids[seq]) d->n_ids[seq] = 0;
    while (lcp < d->n_ids[seq] && lcp < n && held[lcp] == hist[lcp]) lcp++;
    if (lcp >= n) lcp = n - 1; /* the last token decoded again: its logits */
    if (cllm_session_seq_truncate(d->s, seq, (int64_t)lcp) != CLLM_OK) {
        /* a sliding-window layer no longer holds the rows before lcp */
        lcp = 0;
        if (cllm_session_seq_truncate(d->s, seq, 0) != CLLM_OK) goto fail;
    }
    d->n_ids[seq] = lcp;
    if (draft_feed(d, seq, hist, lcp, n, n_chunked) != CLLM_OK) goto fail;
    const int32_t nv = cllm_model_n_vocab(d->model);
    int k = 0;
    for (;;) {
        const float *logits = cllm_session_seq_logits(d->s, seq);
        if (!logits) goto fail;
        int32_t best = 0;
        for (int32_t t = 1; t < nv; t++) {
            if (logits[t] > logits[best]) best = t;
        }
        out[k++] = best;
        if (k >= max || cllm_token_is_eog(d->model, best)) break;
        const size_t at = d->n_ids[seq];
        if (at >= (size_t)d->n_ctx) break;
        held[at] = best; /* fed from where it is held */
        if (draft_feed(d, seq, held, at, at + 1, 0) != CLLM_OK) goto fail;
    }
    *ms = cllm_time_ms() - t0;
    return k >= min ? k : 0;

fail:
    if (!d->warned) CLLM_LOG_WARN("draft model: drafting failed: %s", cllm_last_error());
    d->warned = true;
    (void)cllm_session_seq_truncate(d->s, seq, 0);
    d->n_ids[seq] = 0;
    *ms = cllm_time_ms() - t0;
    return -1;
}
