/* Speculative decoding: the parameters and the n-gram lookup that drafts
 * (cllm.h). The engine (engine.c) verifies the drafts. */
#include "core/common.h"

#include <string.h>

cllm_spec_params cllm_spec_default_params(void) {
    return (cllm_spec_params){
        .type = CLLM_SPEC_NGRAM, .ngram_max = 4, .ngram_min = 2, .draft_max = 8, .draft_min = 1};
}

cllm_status cllm_spec_params_check(const cllm_spec_params *p) {
    if (!p) return CLLM_NULL_ARG("the speculative decoding parameters");
    if ((unsigned)p->type >= CLLM_SPEC_COUNT) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "spec: type %d is not none or ngram-simple",
                          (int)p->type);
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
    default: return "unknown";
    }
}

cllm_status cllm_spec_type_parse(const char *name, cllm_spec_type *out) {
    if (!name || !out) return CLLM_NULL_ARG("name or out");
    if (!strcmp(name, "none")) {
        *out = CLLM_SPEC_NONE;
    } else if (!strcmp(name, "ngram-simple") || !strcmp(name, "ngram")) {
        *out = CLLM_SPEC_NGRAM;
    } else {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "spec: unknown type '%s' (choices: none, ngram-simple)", name);
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
