/*
 * Token sampling: turns one row of logits into one token id.
 *
 *     cllm_sampler_params sp = cllm_sampler_default_params();
 *     sp.temperature = 0.7f;
 *     sp.seed = 1234;
 *     cllm_sampler *s = NULL;
 *     if (cllm_sampler_new(&sp, n_vocab, &s) != CLLM_OK) return ...;
 *     for (each prompt token t) cllm_sampler_accept(s, t); // feeds the penalty window
 *     for (;;) {
 *         const float *logits = ...;                       // [n_vocab], last position
 *         int32_t tok;
 *         if (cllm_sampler_sample(s, logits, &tok) != CLLM_OK) break;
 *         cllm_sampler_accept(s, tok);
 *         ...
 *     }
 *     cllm_sampler_free(s);
 *
 * The pipeline, in this order (each stage is skipped when it is off):
 *
 *   1. repetition penalty: for every distinct token t among the last
 *      `repeat_last_n` accepted tokens, l[t] /= penalty if l[t] > 0, else
 *      l[t] *= penalty;
 *   2. greedy: if temperature == 0, the token with the largest logit (ties: the
 *      lowest id) is returned and nothing below runs;
 *   3. top-k: keep the k largest logits (ties broken by lowest id);
 *   4. temperature: l /= temperature;
 *   5. softmax: p[i] = exp(l[i] - max l) / sum_j exp(l[j] - max l);
 *   6. top-p (nucleus): sort by p descending (ties: lowest id first) and keep
 *      the shortest prefix whose cumulative probability reaches top_p;
 *   7. min-p: keep the tokens with p >= min_p * max p;
 *   8. draw one token from what is left, renormalised, with the sampler's
 *      own PRNG (xoshiro256**, seeded from `seed` through splitmix64).
 *
 * Logits of -inf are a valid mask (the token is never chosen). NaN or +inf
 * logits are rejected with CLLM_ERR_INVALID_ARG, as is a row where every
 * logit is -inf.
 *
 * Cost per token: greedy without penalties is one read-only pass over the
 * logits. Otherwise one pass copies and checks them; top-k costs
 * O(n_vocab log k) with a k-element heap (no full sort); the exp of the
 * softmax runs over what top-k left, or, with min-p and no top-p, only over
 * the tokens min-p keeps; top-p without top-k sorts only the candidates above
 * a probability threshold that provably holds the nucleus. All scratch memory
 * is allocated by cllm_sampler_new; sampling never allocates.
 *
 * Same seed, same parameters and the same sequence of logits and accepted
 * tokens give the same tokens, on every machine with IEEE floats and the same
 * libm expf.
 */
#ifndef CLLM_RUNTIME_SAMPLER_H
#define CLLM_RUNTIME_SAMPLER_H

#include "core/common.h"

/* Largest accepted repeat_last_n (the window is allocated up front). */
#define CLLM_SAMPLER_MAX_WINDOW (1 << 20)

typedef struct cllm_sampler_params {
    float temperature;     /* 0: greedy; > 0: logits are divided by it. Default 0.8 */
    int32_t top_k;         /* keep the k most likely tokens; 0: off. Default 40 */
    float top_p;           /* nucleus mass in (0, 1]; 1: off. Default 0.95 */
    float min_p;           /* in [0, 1]; keep p >= min_p * max p; 0: off. Default 0.05 */
    float repeat_penalty;  /* > 0; 1: off. Default 1 */
    int32_t repeat_last_n; /* penalty window in tokens, >= 0; 0: off. Default 64 */
    uint64_t seed;         /* PRNG seed. Default 0 */
} cllm_sampler_params;

/* One candidate of the final distribution (see cllm_sampler_probs). */
typedef struct cllm_sampler_cand {
    int32_t id; /* token id */
    float p;    /* probability; the candidates returned sum to 1 */
} cllm_sampler_cand;

typedef struct cllm_sampler cllm_sampler;

/*
 * The default parameters (the values given beside each field above; the
 * usual llama.cpp settings). Pure; thread-safe.
 */
cllm_sampler_params cllm_sampler_default_params(void);

/*
 * Creates a sampler for rows of `n_vocab` logits with a copy of `*params`
 * (the caller keeps ownership of `params`). Allocates all scratch memory
 * (about 8 bytes per vocabulary entry plus the window) here.
 *
 * Returns CLLM_OK and the sampler in `*out`, to be released with
 * cllm_sampler_free; CLLM_ERR_INVALID_ARG (with a message naming the field)
 * if a parameter is out of range or not finite, or `n_vocab` <= 0;
 * CLLM_ERR_NOMEM if an allocation fails. On failure `*out` is untouched.
 * Thread-safe (creates an independent object).
 */
cllm_status cllm_sampler_new(const cllm_sampler_params *params, int32_t n_vocab,
                             cllm_sampler **out);

/* Releases a sampler; NULL does nothing. */
void cllm_sampler_free(cllm_sampler *s);

/*
 * Chooses one token from `logits` ([n_vocab] floats, read only: the caller's
 * array is never modified) and writes it to `*out_token`. Does not add the
 * token to the penalty window: call cllm_sampler_accept for that.
 *
 * Returns CLLM_OK; CLLM_ERR_INVALID_ARG if a logit is NaN or +inf, or if all
 * logits are -inf (then `*out_token` is untouched and the sampler's state,
 * PRNG included, is unchanged). Advances the PRNG by one draw unless the
 * sampler is greedy.
 *
 * Not thread-safe: a sampler is used by one thread at a time; distinct
 * samplers are independent.
 */
cllm_status cllm_sampler_sample(cllm_sampler *s, const float *logits, int32_t *out_token);

/*
 * Runs stages 1-7 of the pipeline on `logits` and returns the distribution
 * the next cllm_sampler_sample would draw from: `*out` points at `*n_out`
 * candidates with non-zero probabilities summing to 1, in no particular
 * order. A greedy sampler returns the single chosen token with p = 1. Does
 * not touch the PRNG.
 *
 * The array belongs to the sampler and stays valid until the next call of
 * cllm_sampler_probs, cllm_sampler_sample or cllm_sampler_free on it.
 * Failures as cllm_sampler_sample (outputs untouched). Not thread-safe.
 */
cllm_status cllm_sampler_probs(cllm_sampler *s, const float *logits, const cllm_sampler_cand **out,
                               int32_t *n_out);

/*
 * Appends `token` to the repetition-penalty window (the oldest token falls
 * out when the window is full). Call it for prompt tokens and for every
 * generated token.
 *
 * Returns CLLM_OK, or CLLM_ERR_INVALID_ARG if `token` is not in
 * [0, n_vocab) (the window is unchanged). Not thread-safe.
 */
cllm_status cllm_sampler_accept(cllm_sampler *s, int32_t token);

/*
 * Empties the penalty window and re-seeds the PRNG with the seed given at
 * creation, so that the sampler behaves as if it were new. Not thread-safe.
 */
void cllm_sampler_reset(cllm_sampler *s);

#endif /* CLLM_RUNTIME_SAMPLER_H */
