/* cllm serve: the engine thread, its slots and queue, and one generation
 * step over every busy slot (server.h). */
#include "server.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* One slot: a session, the token ids its KV cache holds, and the state of
 * the job it runs. */
struct srv_slot {
    int index;       /* also its sequence in the engine's session */
    int32_t *cached; /* [n_ctx]: the ids in the KV cache, n_cached of them */
    size_t n_cached;
    size_t n_fresh; /* the first rows, computed as a fresh read computes them */

    srv_job *job; /* NULL: idle */
    cllm_sampler *smp;
    size_t n_fed;    /* prompt tokens in the cache */
    int32_t pending; /* sampled and not yet decoded; -1: none */
    int32_t *gen;    /* [n_ctx] generated ids (the end token excluded) */
    size_t n_gen;
    int32_t *counts; /* [n_vocab] occurrences of each id in gen */
    float *logits;   /* [n_vocab] scratch: penalised logits */
    char *text;      /* detokenized gen */
    size_t text_len, text_cap;
    size_t sent;      /* bytes of text handed to the job */
    uint64_t started; /* when its last job started (engine's count); 0: never */
};

/* ---- UTF-8 -------------------------------------------------------------- */

/* The length of the valid UTF-8 sequence at s[0, n), 0 if invalid or cut. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    const unsigned c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, cp = c & 0x07;
    else
        return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff))) {
        return 0;
    }
    return len;
}

char *srv_utf8_clean(const char *s, size_t n, size_t *out_len) {
    char *out = malloc(n * 3 + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        const size_t k = utf8_seq((const unsigned char *)s + i, n - i);
        if (k == 0) {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        } else {
            memcpy(out + o, s + i, k);
            o += k;
            i += k;
        }
    }
    out[o] = '\0';
    *out_len = o;
    return out;
}

/* How much of s[0, n) ends before a UTF-8 sequence that is cut short. */
static size_t utf8_complete(const char *s, size_t n) {
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        const unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xc0) == 0x80) continue; /* a continuation byte */
        size_t need = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

/* ---- jobs --------------------------------------------------------------- */

void srv_gen_params_free(srv_gen_params *gp) {
    for (int i = 0; i < gp->n_stop; i++) free(gp->stop[i]);
    gp->n_stop = 0;
}

srv_job *srv_job_new(int32_t *prompt, size_t n_prompt, srv_gen_params *gp, double deadline_ms) {
    srv_job *j = calloc(1, sizeof(*j));
    if (!j || pthread_cond_init(&j->cond, NULL) != 0) {
        free(j);
        free(prompt);
        srv_gen_params_free(gp);
        return NULL;
    }
    j->prompt = prompt;
    j->n_prompt = n_prompt;
    j->gp = *gp;
    j->deadline_ms = deadline_ms;
    j->refs = 2;
    return j;
}

static void job_free(srv_job *j) {
    free(j->prompt);
    free(j->out);
    json_decref(j->logprobs);
    srv_gen_params_free(&j->gp);
    pthread_cond_destroy(&j->cond);
    free(j);
}

/* Under the mutex: one side lets go. */
static void job_unref(srv_job *j) {
    if (--j->refs == 0) job_free(j);
}

void srv_job_release(srv_engine *e, srv_job *job) {
    pthread_mutex_lock(&e->mu);
    if (job->state != SRV_JOB_DONE) {
        job->cancel = true;
        pthread_cond_signal(&e->work);
    }
    job_unref(job);
    pthread_mutex_unlock(&e->mu);
}

bool srv_engine_submit(srv_engine *e, srv_job *job) {
    pthread_mutex_lock(&e->mu);
    const bool ok = !e->stop && e->n_queued < e->max_queue;
    if (ok) {
        job->state = SRV_JOB_QUEUED;
        if (e->queue_tail)
            e->queue_tail->next = job;
        else
            e->queue_head = job;
        e->queue_tail = job;
        e->n_queued++;
        pthread_cond_signal(&e->work);
    } else {
        e->stats.queue_full++;
    }
    pthread_mutex_unlock(&e->mu);
    return ok;
}

/* Under the mutex: appends text to what the job's reader has not taken. */
static bool job_put(srv_job *j, const char *s, size_t n) {
    if (n == 0) return true;
    if (j->out_len + n > j->out_cap) {
        const size_t cap = (j->out_len + n) * 2 + 64;
        char *nb = realloc(j->out, cap);
        if (!nb) return false;
        j->out = nb;
        j->out_cap = cap;
    }
    memcpy(j->out + j->out_len, s, n);
    j->out_len += n;
    return true;
}

/* ---- slots -------------------------------------------------------------- */

bool srv_engine_init(srv_engine *e, const cllm_model *model, cllm_pipe *pipe, int n_slots,
                     const cllm_session_params *params, int max_queue, bool verbose) {
    memset(e, 0, sizeof(*e));
    if (pipe) {
        model = cllm_pipe_model(pipe);
        n_slots = cllm_pipe_n_seq(pipe);
    }
    e->model = model;
    e->pipe = pipe;
    e->max_queue = max_queue;
    e->verbose = verbose;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work, NULL);
    e->slots = calloc((size_t)n_slots, sizeof(*e->slots));
    if (!e->slots) {
        fprintf(stderr, "cllm serve: out of memory for %d slots\n", n_slots);
        return false;
    }
    const size_t n_vocab = (size_t)cllm_model_n_vocab(model);
    e->eog = malloc(n_vocab * sizeof(int32_t));
    if (!e->eog) {
        fprintf(stderr, "cllm serve: out of memory for the vocabulary\n");
        srv_engine_free(e);
        return false;
    }
    for (int32_t id = 0; id < (int32_t)n_vocab; id++) {
        if (cllm_token_is_eog(model, id)) e->eog[e->n_eog++] = id;
    }
    /* one session, a sequence (and KV cache) per slot: a step decodes every
     * busy slot's tokens in one forward pass */
    cllm_session_params sp = *params;
    sp.n_seq = n_slots;
    if (sp.n_batch > 0 && sp.n_batch < n_slots) sp.n_batch = n_slots;
    if (pipe) {
        sp.n_batch = cllm_pipe_get_plan(pipe)->n_batch;
    } else if (cllm_session_new(model, &sp, &e->s) != CLLM_OK) {
        fprintf(stderr, "cllm serve: %d slots: %s\n", n_slots, cllm_last_error());
        srv_engine_free(e);
        return false;
    }
    const size_t n_ctx = (size_t)cllm_session_n_ctx(pipe ? cllm_pipe_session(pipe) : e->s);
    e->n_ctx = (int64_t)n_ctx;
    for (int i = 0; i < n_slots; i++) {
        srv_slot *sl = &e->slots[i];
        sl->index = i;
        sl->pending = -1;
        e->n_slots = i + 1;
        sl->cached = malloc(n_ctx * sizeof(int32_t));
        sl->gen = malloc(n_ctx * sizeof(int32_t));
        sl->counts = calloc(n_vocab, sizeof(int32_t));
        sl->logits = malloc(n_vocab * sizeof(float));
        if (!sl->cached || !sl->gen || !sl->counts || !sl->logits) {
            fprintf(stderr, "cllm serve: out of memory for slot %d\n", i);
            srv_engine_free(e);
            return false;
        }
    }
    e->n_batch = sp.n_batch > 0 ? sp.n_batch : 512;
    if (e->n_batch < n_slots) e->n_batch = n_slots;
    /* not across ranks: a rank whose layers slide a window may refuse a
     * rewind that rank 0 accepted, which would end the pipeline */
    e->chunked = !pipe && e->n_batch >= 2 * SRV_MIN_CHUNK;
    return true;
}

cllm_memory_report srv_engine_memory(const srv_engine *e) {
    if (!e->pipe) return cllm_session_memory(e->s);
    /* this rank's: the weights once, the rest per slot's session */
    cllm_memory_report r = {0};
    for (int i = 0; i < e->n_slots; i++) {
        const cllm_memory_report q = cllm_session_memory(cllm_pipe_session_seq(e->pipe, i));
        for (int k = 0; k < CLLM_MEM_COUNT; k++) {
            const bool once = k == CLLM_MEM_WEIGHTS;
            r.planned[k] = once ? q.planned[k] : r.planned[k] + q.planned[k];
            r.allocated[k] = once ? q.allocated[k] : r.allocated[k] + q.allocated[k];
        }
    }
    return r;
}

/* The slot's sequence: going back to n_keep tokens, and its last logits. */
static cllm_status slot_truncate(srv_engine *e, const srv_slot *sl, int64_t n_keep) {
    if (e->pipe) return cllm_session_truncate(cllm_pipe_session_seq(e->pipe, sl->index), n_keep);
    return cllm_session_seq_truncate(e->s, sl->index, n_keep);
}

static const float *slot_logits(srv_engine *e, const srv_slot *sl) {
    if (e->pipe) return cllm_session_logits(cllm_pipe_session_seq(e->pipe, sl->index));
    return cllm_session_seq_logits(e->s, sl->index);
}

/* Under the mutex: the job of slot `sl` ends with `why`; the slot keeps its
 * cache. */
static void slot_finish(srv_engine *e, srv_slot *sl, srv_finish why) {
    srv_job *j = sl->job;
    j->finish = why;
    j->state = SRV_JOB_DONE;
    j->n_completion = sl->n_gen;
    e->stats.prompt_tokens += j->n_prompt;
    e->stats.prompt_cached += j->n_cached;
    e->stats.completion_tokens += sl->n_gen;
    if (why == SRV_FINISH_CANCELLED || why == SRV_FINISH_TIMEOUT) e->stats.cancelled++;
    pthread_cond_broadcast(&j->cond);
    job_unref(j);
    sl->job = NULL;
    cllm_sampler_free(sl->smp);
    sl->smp = NULL;
    e->n_busy--;
    if (e->verbose) {
        fprintf(stderr,
                "cllm serve: slot %d: done (%d): %zu prompt tokens, %zu cached, %zu "
                "generated\n",
                sl->index, (int)why, j->n_prompt, j->n_cached, sl->n_gen);
    }
}

/* Under the mutex: starts job j on idle slot sl, keeping the longest common
 * prefix of its cache and the prompt (at least one prompt token is decoded
 * anew, for the logits to sample from). */
static void slot_start(srv_engine *e, srv_slot *sl, srv_job *j, size_t lcp) {
    if (lcp >= j->n_prompt) lcp = j->n_prompt - 1;
    if (slot_truncate(e, sl, (int64_t)lcp) != CLLM_OK) {
        (void)slot_truncate(e, sl, 0);
        lcp = 0;
    }
    sl->n_cached = lcp;
    if (sl->n_fresh > lcp) sl->n_fresh = lcp;
    sl->n_fed = lcp;
    j->n_cached = lcp;
    for (size_t i = 0; i < sl->n_gen; i++) sl->counts[sl->gen[i]] = 0;
    sl->n_gen = 0;
    sl->pending = -1;
    sl->text_len = 0;
    sl->sent = 0;
    sl->job = j;
    sl->started = ++e->n_started;
    j->state = SRV_JOB_RUNNING;
    e->n_busy++;
    if (cllm_sampler_new(&j->gp.sp, cllm_model_n_vocab(e->model), &sl->smp) != CLLM_OK) {
        snprintf(j->error, sizeof(j->error), "%s", cllm_last_error());
        slot_finish(e, sl, SRV_FINISH_ERROR);
        return;
    }
    /* the penalty window sees the prompt, as cllm_generate's does */
    const size_t win = (size_t)j->gp.sp.repeat_last_n;
    const size_t from = j->n_prompt > win ? j->n_prompt - win : 0;
    for (size_t i = from; i < j->n_prompt; i++) (void)cllm_sampler_accept(sl->smp, j->prompt[i]);
    if (e->verbose) {
        fprintf(stderr, "cllm serve: slot %d: %zu prompt tokens, %zu reused from its cache\n",
                sl->index, j->n_prompt, lcp);
    }
}

/*
 * The prompt tokens a slot can reuse.
 *
 * - Its whole cache, when the prompt extends it and the cache holds rows
 *   of an answer: a conversation's next turn. Those rows were computed one
 *   token at a time, which the kernels round differently from a prompt
 *   chunk, so the answer is that of this conversation in this order (as
 *   with any chat engine), not always bit for bit that of a fresh read of
 *   the prompt. A cache of prompt rows only (a request cancelled before its
 *   answer began) is reused whole only when the rest holds at least
 *   SRV_MIN_CHUNK tokens; else as below (reused whole, the same prompt
 *   again would have its last token decoded alone, and its answer could
 *   differ from the first one's).
 * - Otherwise the longest common prefix, cut back to rows computed as a
 *   fresh read of the prompt computes them (n_fresh), with at least
 *   SRV_MIN_CHUNK tokens left to decode. Prompt chunks hold at least
 *   SRV_MIN_CHUNK tokens (prompt_chunk), and decoding the same tokens in
 *   any such chunks, wherever they start, gives the same rows and logits
 *   bit for bit (from 8 columns on, the kernels sum every column the same
 *   way whatever columns share its pass; test_seqs checks it), so such a
 *   reuse does not change any answer: a shared system prompt, a
 *   regenerated or edited last message.
 */
static size_t slot_reuse(const srv_engine *e, const srv_slot *sl, const srv_job *j) {
    size_t lcp = 0;
    while (lcp < sl->n_cached && lcp < j->n_prompt && sl->cached[lcp] == j->prompt[lcp]) lcp++;
    if (lcp == sl->n_cached &&
        (!e->chunked || sl->n_fresh < sl->n_cached || j->n_prompt - lcp >= SRV_MIN_CHUNK)) {
        return lcp;
    }
    if (!e->chunked || j->n_prompt <= SRV_MIN_CHUNK) return 0;
    const size_t r = lcp < sl->n_fresh ? lcp : sl->n_fresh;
    return r < j->n_prompt - SRV_MIN_CHUNK ? r : j->n_prompt - SRV_MIN_CHUNK;
}

/* The next chunk of a prompt with `left` tokens to read: n_batch, less
 * SRV_MIN_CHUNK when the rest would be shorter than that, the whole rest
 * when it fits. */
static int64_t prompt_chunk(const srv_engine *e, size_t left) {
    const size_t b = (size_t)e->n_batch;
    if (left <= b) return (int64_t)left;
    return (int64_t)(e->chunked && left - b < SRV_MIN_CHUNK ? b - SRV_MIN_CHUNK : b);
}

/* Under the mutex: cancels what must be, then gives queued jobs to idle
 * slots, each to the idle slot of which it can reuse the most tokens
 * (slot_reuse); a job that can reuse none takes the slot used longest ago
 * (an empty one first), so the caches of other conversations live as long
 * as they can. */
static void engine_schedule(srv_engine *e) {
    const double now = cllm_time_ms();
    for (int i = 0; i < e->n_slots; i++) {
        srv_slot *sl = &e->slots[i];
        if (!sl->job) continue;
        if (sl->job->cancel || e->stop || e->failed)
            slot_finish(e, sl, SRV_FINISH_CANCELLED);
        else if (sl->job->deadline_ms > 0 && now > sl->job->deadline_ms) {
            slot_finish(e, sl, SRV_FINISH_TIMEOUT);
        }
    }
    srv_job **pp = &e->queue_head;
    e->queue_tail = NULL;
    while (*pp) {
        srv_job *j = *pp;
        srv_finish why = SRV_FINISH_NONE;
        if (j->cancel || e->stop || e->failed)
            why = SRV_FINISH_CANCELLED;
        else if (j->deadline_ms > 0 && now > j->deadline_ms)
            why = SRV_FINISH_TIMEOUT;
        int best = -1;
        size_t best_lcp = 0;
        if (why == SRV_FINISH_NONE) {
            for (int i = 0; i < e->n_slots; i++) {
                const srv_slot *sl = &e->slots[i];
                if (sl->job) continue;
                const size_t lcp = slot_reuse(e, sl, j);
                if (best < 0 || lcp > best_lcp ||
                    (lcp == best_lcp && sl->started < e->slots[best].started)) {
                    best = i, best_lcp = lcp;
                }
            }
        }
        if (why == SRV_FINISH_NONE && best < 0) { /* no idle slot: it waits */
            e->queue_tail = j;
            pp = &j->next;
            continue;
        }
        *pp = j->next;
        j->next = NULL;
        e->n_queued--;
        if (why != SRV_FINISH_NONE) {
            j->finish = why;
            j->state = SRV_JOB_DONE;
            e->stats.cancelled++;
            pthread_cond_broadcast(&j->cond);
            job_unref(j);
        } else {
            slot_start(e, &e->slots[best], j, best_lcp);
        }
    }
}

/* ---- one step ----------------------------------------------------------- */

/* The log-probabilities of the model's distribution at this position (the
 * softmax of the raw logits) for the sampled id and the top ones, as a chat
 * entry {token, logprob, bytes, top_logprobs: [...]}. */
static json_t *token_json(const cllm_model *m, int32_t id, double lp) {
    size_t n = 0;
    const char *p = cllm_token_to_piece(m, id, false, &n);
    if (!p) p = "", n = 0;
    size_t clen = 0;
    char *clean = srv_utf8_clean(p, n, &clen);
    json_t *bytes = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(bytes, json_integer((unsigned char)p[i]));
    json_t *o = json_pack("{s:s%,s:f,s:o}", "token", clean ? clean : "", clean ? clen : 0,
                          "logprob", lp, "bytes", bytes);
    free(clean);
    return o;
}

static json_t *logprob_entry(const cllm_model *m, const float *logits, int64_t n_vocab, int32_t id,
                             int top) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int64_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    const double lse = mx + log(sum);
    json_t *e = token_json(m, id, (double)logits[id] - lse);
    json_t *tops = json_array();
    int32_t best[SRV_MAX_TOP_LOGPROBS];
    int nb = 0;
    for (int64_t i = 0; i < n_vocab && top > 0; i++) { /* insertion into the top list */
        if (nb == top && logits[i] <= logits[best[nb - 1]]) continue;
        int k = nb < top ? nb++ : nb - 1;
        while (k > 0 && logits[best[k - 1]] < logits[i]) best[k] = best[k - 1], k--;
        best[k] = (int32_t)i;
    }
    for (int k = 0; k < nb; k++) {
        json_array_append_new(tops, token_json(m, best[k], (double)logits[best[k]] - lse));
    }
    json_object_set_new(e, "top_logprobs", tops);
    return e;
}

/* The detokenized text of sl->gen into sl->text. */
static bool slot_detokenize(const cllm_model *m, srv_slot *sl) {
    size_t len = 0;
    if (cllm_detokenize(m, sl->gen, sl->n_gen, 0, NULL, 0, &len) != CLLM_OK) return false;
    if (len + 1 > sl->text_cap) {
        char *nb = realloc(sl->text, len * 2 + 64);
        if (!nb) return false;
        sl->text = nb;
        sl->text_cap = len * 2 + 64;
    }
    if (cllm_detokenize(m, sl->gen, sl->n_gen, 0, sl->text, sl->text_cap, &len) != CLLM_OK) {
        return false;
    }
    sl->text_len = len;
    return true;
}

/* Under the mutex: hands the text that is decided to the job. With `final`
 * everything left goes; otherwise a stop string found ends the job, and the
 * end that may still begin one is held back, as is a cut UTF-8 sequence.
 * Returns true when a stop string was found. */
static bool slot_emit(srv_slot *sl, bool final) {
    srv_job *j = sl->job;
    size_t end = final ? sl->text_len : utf8_complete(sl->text, sl->text_len);
    bool stopped = false;
    if (j->gp.n_stop > 0) {
        /* a stop string can only begin after what was sent */
        size_t first = SIZE_MAX;
        for (int i = 0; i < j->gp.n_stop; i++) {
            const char *s = j->gp.stop[i];
            const char *hit = memmem(sl->text + sl->sent, sl->text_len - sl->sent, s, strlen(s));
            if (hit && (size_t)(hit - sl->text) < first) first = (size_t)(hit - sl->text);
        }
        if (first != SIZE_MAX) {
            end = first;
            stopped = true;
        } else if (!final) {
            /* hold back the longest end of the text that begins a stop string */
            size_t hold = 0;
            for (int i = 0; i < j->gp.n_stop; i++) {
                const char *s = j->gp.stop[i];
                for (size_t k = strlen(s) - 1; k > hold; k--) {
                    if (k <= end - sl->sent && !memcmp(sl->text + end - k, s, k)) {
                        hold = k;
                        break;
                    }
                }
            }
            end -= hold;
        }
    }
    if (end > sl->sent) {
        if (!job_put(j, sl->text + sl->sent, end - sl->sent)) return false;
        sl->sent = end;
    }
    return stopped;
}

/* Under the mutex: samples the next token of slot sl from its logits,
 * records it and its text; ends the job on an end token, a stop string or
 * its length. */
static void slot_sample(srv_engine *e, srv_slot *sl) {
    srv_job *j = sl->job;
    const int64_t n_vocab = cllm_model_n_vocab(e->model);
    const float *logits = slot_logits(e, sl);
    if (!logits) {
        snprintf(j->error, sizeof(j->error), "no logits after decoding");
        slot_finish(e, sl, SRV_FINISH_ERROR);
        return;
    }
    const float *use = logits;
    if ((j->gp.presence_penalty != 0 || j->gp.frequency_penalty != 0) && sl->n_gen > 0) {
        /* OpenAI's penalties over the tokens generated so far, on a copy */
        memcpy(sl->logits, logits, (size_t)n_vocab * sizeof(float));
        for (size_t i = 0; i < sl->n_gen; i++) {
            const int32_t id = sl->gen[i];
            if (sl->counts[id] < 0) continue; /* done (marked below) */
            sl->logits[id] -=
                (float)sl->counts[id] * j->gp.frequency_penalty + j->gp.presence_penalty;
            sl->counts[id] = -sl->counts[id];
        }
        for (size_t i = 0; i < sl->n_gen; i++) {
            if (sl->counts[sl->gen[i]] < 0) sl->counts[sl->gen[i]] = -sl->counts[sl->gen[i]];
        }
        use = sl->logits;
    }
    if (j->gp.ignore_eos) { /* on the copy (made here if not above) */
        if (use != sl->logits) memcpy(sl->logits, logits, (size_t)n_vocab * sizeof(float));
        use = sl->logits;
        for (int64_t i = 0; i < e->n_eog; i++) sl->logits[e->eog[i]] = -INFINITY;
    }
    int32_t id;
    if (cllm_sampler_sample(sl->smp, use, &id) != CLLM_OK) {
        snprintf(j->error, sizeof(j->error), "sampling failed: %s", cllm_last_error());
        slot_finish(e, sl, SRV_FINISH_ERROR);
        return;
    }
    (void)cllm_sampler_accept(sl->smp, id);
    if (cllm_token_is_eog(e->model, id)) {
        slot_emit(sl, true);
        slot_finish(e, sl, SRV_FINISH_STOP);
        return;
    }
    sl->gen[sl->n_gen++] = id;
    sl->counts[id]++;
    sl->pending = id;
    if (j->gp.logprobs) {
        if (!j->logprobs) j->logprobs = json_array();
        json_array_append_new(j->logprobs,
                              logprob_entry(e->model, logits, n_vocab, id, j->gp.top_logprobs));
    }
    if (!slot_detokenize(e->model, sl)) {
        snprintf(j->error, sizeof(j->error), "out of memory for the text");
        slot_finish(e, sl, SRV_FINISH_ERROR);
        return;
    }
    const bool at_length = j->gp.max_tokens >= 0 && sl->n_gen >= (size_t)j->gp.max_tokens;
    /* the pending token needs one more place in the context */
    const bool full = sl->n_cached + 1 > (size_t)e->n_ctx;
    if (slot_emit(sl, false)) {
        slot_finish(e, sl, SRV_FINISH_STOP);
    } else if (at_length || full) {
        if (slot_emit(sl, true))
            slot_finish(e, sl, SRV_FINISH_STOP);
        else
            slot_finish(e, sl, SRV_FINISH_LENGTH);
    }
    /* a streaming reader takes each token's text; a whole answer's reader
     * is woken by slot_finish only (a wake-up per token would take a core
     * from the compute threads) */
    if (j->stream) pthread_cond_broadcast(&j->cond);
}

/* What a busy slot decodes in this step: a chunk of its prompt, or the
 * token it sampled last. */
typedef struct srv_work {
    srv_slot *slot;
    const int32_t *ids;
    int64_t n;
    bool sample; /* the logits of the last id are sampled afterwards */
    cllm_status st;
} srv_work;

/* One forward pass over items[0, n); if it fails, each item alone. */
static void engine_decode_pass(srv_engine *e, srv_work *w, const cllm_seq_tokens *items, int n) {
    const cllm_status st = cllm_session_decode_seqs(e->s, items, n);
    for (int i = 0; i < n; i++)
        w[i].st = st == CLLM_OK || n == 1 ? st : cllm_session_decode_seqs(e->s, &items[i], 1);
}

/*
 * Decodes the items of a step: the generating slots' tokens (one each, the
 * first items) and the prompt chunks of at least SRV_MIN_CHUNK (8) tokens that
 * fit beside them in n_batch, in one forward pass, which reads the weights
 * once for all of them: each one-token column is computed as it would be
 * alone (cllm_mul_mat_set_cols_alone) and attends to its own KV cache, and
 * the chunks' columns as in a pass of their own (cllm_mul_mat_set_n_alone).
 * The other prompt chunks go together in passes of up to n_batch tokens:
 * chunks of at least SRV_MIN_CHUNK tokens get in a joint pass the logits they
 * get read alone, bit for bit (cllm_session_decode_seqs), and requests that
 * arrive together pay for the weights once instead of once each. A shorter
 * chunk (a prompt of fewer tokens) has a pass of its own. So a request's
 * answer does not depend on the others. If a shared pass fails, its items
 * are decoded one by one, so that only a slot that cannot go on fails.
 * Called without the mutex (only the engine thread touches the session).
 */
static void engine_decode(srv_engine *e, srv_work *w, int n) {
    cllm_seq_tokens items[256];
    int n_step = 0;
    for (int i = 0; i < n; i++) {
        items[i] = (cllm_seq_tokens){w[i].slot->index, w[i].ids, w[i].n};
        if (w[i].ids == &w[i].slot->pending) n_step = i + 1;
    }
    if (e->pipe) {
        /* a session per slot on each rank: every item goes down the
         * pipeline while rank 0 computes the next one; a failure is the
         * pipeline's (a rank or a transfer), fatal for all of them */
        const cllm_status st = cllm_pipe_decode_items(e->pipe, items, n);
        for (int i = 0; i < n; i++) w[i].st = st;
        return;
    }
    int i = n_step;
    if (n_step > 0) {
        int64_t total = n_step;
        while (i < n && items[i].n_tokens >= SRV_MIN_CHUNK &&
               total + items[i].n_tokens <= e->n_batch)
            total += items[i++].n_tokens;
        engine_decode_pass(e, w, items, i);
    }
    while (i < n) {
        int j = i + 1;
        int64_t total = items[i].n_tokens;
        while (items[i].n_tokens >= SRV_MIN_CHUNK && j < n && items[j].n_tokens >= SRV_MIN_CHUNK &&
               total + items[j].n_tokens <= e->n_batch) {
            total += items[j++].n_tokens;
        }
        engine_decode_pass(e, w + i, items + i, j - i);
        i = j;
    }
}

/*
 * Advances every busy slot by one step: a slot still reading its prompt
 * decodes the next chunk of at most n_batch tokens; a generating slot
 * decodes the token it sampled; then each slot whose logits are ready
 * samples its next token and hands its new text to its job. What a slot
 * computes depends only on its own job and cache, never on the other slots.
 * Returns the number of slots advanced. Called without the mutex.
 */
static int srv_engine_step(srv_engine *e) {
    srv_work work[256];
    int n = 0;
    pthread_mutex_lock(&e->mu);
    /* a token of every generating slot, then the next chunk of every
     * prompt being read (at most n_batch tokens, as it would be alone) */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < e->n_slots && n < (int)(sizeof(work) / sizeof(work[0])); i++) {
            srv_slot *sl = &e->slots[i];
            srv_job *j = sl->job;
            if (!j || (sl->n_fed < j->n_prompt) != (pass == 1)) continue;
            srv_work *w = &work[n++];
            w->slot = sl;
            if (pass == 1) {
                const size_t left = j->n_prompt - sl->n_fed;
                w->ids = j->prompt + sl->n_fed;
                w->n = prompt_chunk(e, left);
                w->sample = (size_t)w->n == left;
            } else {
                w->ids = &sl->pending;
                w->n = 1;
                w->sample = true;
            }
        }
    }
    pthread_mutex_unlock(&e->mu);
    if (n == 0) return 0;

    engine_decode(e, work, n);

    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < n; i++) {
        srv_work *w = &work[i];
        srv_slot *sl = w->slot;
        if (w->st != CLLM_OK) {
            snprintf(sl->job->error, sizeof(sl->job->error), "decoding failed: %s",
                     cllm_last_error());
            if (e->pipe && !e->failed) {
                /* the main thread reports it and exits non-zero */
                e->failed = true;
                snprintf(e->failure, sizeof(e->failure), "%s", cllm_last_error());
                kill(getpid(), SIGTERM);
            }
            (void)slot_truncate(e, sl, (int64_t)sl->n_cached);
            slot_finish(e, sl, SRV_FINISH_ERROR);
            continue;
        }
        memcpy(sl->cached + sl->n_cached, w->ids, (size_t)w->n * sizeof(int32_t));
        /* a prompt chunk of SRV_MIN_CHUNK or more after fresh rows: its
         * rows are fresh too */
        if (w->ids != &sl->pending && e->chunked && sl->n_fresh == sl->n_cached &&
            w->n >= SRV_MIN_CHUNK) {
            sl->n_fresh += (size_t)w->n;
        }
        sl->n_cached += (size_t)w->n;
        if (sl->n_fed < sl->job->n_prompt) sl->n_fed += (size_t)w->n;
        if (w->sample) slot_sample(e, sl);
    }
    pthread_mutex_unlock(&e->mu);
    return n;
}

static void *engine_main(void *arg) {
    srv_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        engine_schedule(e);
        if (e->stop && e->n_busy == 0 && !e->queue_head) break;
        if (e->n_busy == 0) {
            /* idle: wake for new work, or to time out queued jobs */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&e->work, &e->mu, &ts);
            continue;
        }
        pthread_mutex_unlock(&e->mu);
        srv_engine_step(e);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

bool srv_engine_start(srv_engine *e) {
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        fprintf(stderr, "cllm serve: cannot start the engine thread\n");
        return false;
    }
    e->started = true;
    return true;
}

void srv_engine_stop(srv_engine *e) {
    if (e->started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true;
        pthread_cond_signal(&e->work);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
        e->started = false;
    }
}

void srv_engine_free(srv_engine *e) {
    srv_engine_stop(e);
    for (int i = 0; i < e->n_slots; i++) {
        srv_slot *sl = &e->slots[i];
        cllm_sampler_free(sl->smp);
        free(sl->cached);
        free(sl->gen);
        free(sl->counts);
        free(sl->logits);
        free(sl->text);
    }
    free(e->slots);
    e->slots = NULL;
    free(e->eog);
    e->eog = NULL;
    e->n_eog = 0;
    cllm_session_free(e->s);
    e->s = NULL;
    e->n_slots = 0;
    pthread_cond_destroy(&e->work);
    pthread_mutex_destroy(&e->mu);
}
