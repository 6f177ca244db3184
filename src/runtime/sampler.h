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
 *   1. logit bias: l[t] += bias[t] (-inf masks t);
 *   2. OpenAI's penalties over the generated tokens (cllm_sampler_accept
 *      since the last reset; not the prompt's, cllm_sampler_accept_prompt):
 *      l[t] -= frequency_penalty * count[t] + presence_penalty, for every t
 *      with count[t] > 0;
 *   3. ignore_eos: l[t] = -inf for the model's end-of-generation tokens;
 *   4. repetition penalty: for every distinct token t among the last
 *      `repeat_last_n` accepted tokens (prompt and generated), l[t] /=
 *      penalty if l[t] > 0, else l[t] *= penalty;
 *   5. grammar: l[t] = -inf for every token t whose bytes cannot continue
 *      the text accepted so far (text/grammar.h), and for the end tokens
 *      unless that text is complete. Lazily: stages 6-12 run on the row
 *      without it, and only when the grammar refuses the token they give
 *      do they run again on the masked row (one walk of the vocabulary's
 *      trie); the result has the masked row's distribution (see
 *      sample_grammar in sampler.c);
 *   6. greedy: if temperature == 0, the token with the largest logit (ties: the
 *      lowest id) is returned and nothing below runs;
 *   7. top-k: keep the k largest logits (ties broken by lowest id);
 *   8. temperature: l /= temperature;
 *   9. softmax: p[i] = exp(l[i] - max l) / sum_j exp(l[j] - max l);
 *  10. top-p (nucleus): sort by p descending (ties: lowest id first) and keep
 *      the shortest prefix whose cumulative probability reaches top_p;
 *  11. min-p: keep the tokens with p >= min_p * max p;
 *  12. draw one token from what is left, renormalised, with the sampler's
 *      own PRNG (xoshiro256**, seeded from `seed` through splitmix64).
 *
 * Stages 1-5 work on a copy of the row (a memcpy, then only the tokens they
 * touch); a result above FLT_MAX becomes FLT_MAX.
 *
 * Logits of -inf are a valid mask (the token is never chosen). NaN or +inf
 * logits are rejected with CLLM_ERR_INVALID_ARG, as is a row where every
 * logit is -inf.
 *
 * Cost per token: stages 1-4, when on, copy the row once (memcpy) and touch
 * only their tokens. Greedy is then one read-only pass over the row.
 * Otherwise one pass copies and checks it into candidates; top-k costs
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

/* The sampler API is public (cllm.h); the implementation is sampler.c. */

/* The vocabulary size the sampler was made for. */
int32_t cllm_sampler_n_vocab(const cllm_sampler *s);

/* What sampling and accepting tokens change in a sampler, but its grammar's
 * state: the repetition window, the penalty counts and the PRNG. */
typedef struct cllm_sampler_saved {
    int32_t *window; /* (repeat_last_n) */
    int32_t window_len, window_head;
    int32_t *counts; /* (n_vocab) or NULL without penalties */
    int32_t n_gen;
    uint64_t rng[4];
} cllm_sampler_saved;

/* Copies that state of s into *out (CLLM_ERR_NOMEM: *out is empty). */
cllm_status cllm_sampler_save(const cllm_sampler *s, cllm_sampler_saved *out);

/* Puts back into s the state saved from it. */
void cllm_sampler_restore(cllm_sampler *s, const cllm_sampler_saved *saved);

/* Frees what cllm_sampler_save allocated; an empty one does nothing. */
void cllm_sampler_saved_free(cllm_sampler_saved *saved);

#endif /* CLLM_RUNTIME_SAMPLER_H */
