/* cllm serve: the engine thread, which feeds the library's batch engine
 * from the queue and hands its events to the jobs (server.h). */
#include "server.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* ---- jobs --------------------------------------------------------------- */

void srv_gen_params_free(srv_gen_params *gp) {
    for (int i = 0; i < gp->n_stop; i++) free(gp->stop[i]);
    gp->n_stop = 0;
    free(gp->bias);
    gp->bias = NULL;
    gp->rp.sampling.logit_bias = NULL;
    gp->rp.sampling.n_logit_bias = 0;
    free(gp->grammar);
    gp->grammar = NULL;
    gp->rp.sampling.grammar = NULL;
    free(gp->triggers);
    gp->triggers = NULL;
    gp->rp.sampling.grammar_trigger_tokens = NULL;
    gp->rp.sampling.n_grammar_trigger_tokens = 0;
    gp->rp.sampling.grammar_triggers = NULL;
    gp->rp.sampling.n_grammar_triggers = 0;
}

srv_job *srv_job_new(int32_t *prompt, size_t n_prompt, srv_gen_params *gp, double deadline_ms) {
    srv_job *j = calloc(1, sizeof(*j));
    if (!j) {
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
    free(j->embd);
    json_decref(j->logprobs);
    srv_gen_params_free(&j->gp);
    free(j);
}

/* Under the mutex: tells the HTTP side that the job changed (its text, its
 * log-probabilities or its end). */
static void job_wake(srv_job *j) {
    if (j->wake) j->wake(j->wake_arg);
}

/* Under the mutex: one side lets go. */
static void job_unref(srv_job *j) {
    if (--j->refs == 0) job_free(j);
}

void srv_job_release(srv_engine *e, srv_job *job) {
    pthread_mutex_lock(&e->mu);
    job->wake = NULL; /* the HTTP side's state goes with it */
    job->wake_arg = NULL;
    if (job->state != SRV_JOB_DONE) {
        job->cancel = true;
        pthread_cond_signal(&e->work);
    }
    job_unref(job);
    pthread_mutex_unlock(&e->mu);
}

bool srv_engine_submit(srv_engine *e, srv_job *job) {
    pthread_mutex_lock(&e->mu);
    const bool ok = !e->stop && !e->failed && e->n_queued < e->max_queue;
    if (ok) {
        job->state = SRV_JOB_QUEUED;
        if (e->queue_tail)
            e->queue_tail->next = job;
        else
            e->queue_head = job;
        e->queue_tail = job;
        e->n_in_queue++;
        e->n_queued++;
        pthread_cond_signal(&e->work);
    } else {
        e->stats.queue_full++;
    }
    pthread_mutex_unlock(&e->mu);
    return ok;
}

/* Under the mutex: the job ends with `why` (the HTTP side is woken). */
static void job_done(srv_engine *e, srv_job *j, srv_finish why) {
    j->finish = why;
    j->state = SRV_JOB_DONE;
    if (why == SRV_FINISH_CANCELLED || why == SRV_FINISH_TIMEOUT) e->stats.cancelled++;
    job_wake(j);
    job_unref(j);
}

/* Under the mutex: appends text to what the job's reader has not taken. */
static bool job_put(srv_job *j, const char *s, size_t n) {
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

/* ---- events ------------------------------------------------------------- */

/* A token and its log-probability as a chat entry {token, logprob, bytes}. */
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

/* The chat entry of a token event: the token and its top alternatives. */
static json_t *logprob_entry(const cllm_model *m, const cllm_event *ev) {
    json_t *o = token_json(m, ev->token, ev->logprob);
    json_t *tops = json_array();
    for (int k = 0; k < ev->n_top; k++) {
        json_array_append_new(tops, token_json(m, ev->top[k].id, ev->top[k].logprob));
    }
    json_object_set_new(o, "top_logprobs", tops);
    return o;
}

static srv_finish finish_of(const cllm_event *ev, const srv_job *j) {
    switch (ev->reason) {
    case CLLM_STOP_EOG:
    case CLLM_STOP_STRING: return SRV_FINISH_STOP;
    case CLLM_STOP_LENGTH:
    case CLLM_STOP_CONTEXT_FULL: return SRV_FINISH_LENGTH;
    case CLLM_STOP_CANCELLED:
        return j->cancel_why != SRV_FINISH_NONE ? j->cancel_why : SRV_FINISH_CANCELLED;
    default: return SRV_FINISH_ERROR;
    }
}

/* The engine's events (on the engine thread, during a step, without the
 * mutex): each goes to its job under the mutex. A streaming reader is woken
 * for its text; a whole answer's reader only at the end (a wake-up per
 * token would take a core from the compute threads). */
static void on_event(const cllm_event *ev, void *ud) {
    srv_engine *e = ud;
    srv_job *j = ev->user_data;
    if (ev->kind == CLLM_EVENT_TOKEN) {
        if (!j->gp.logprobs) return;
        json_t *entry = logprob_entry(e->model, ev);
        pthread_mutex_lock(&e->mu);
        if (!j->logprobs) j->logprobs = json_array();
        json_array_append_new(j->logprobs, entry);
        if (j->stream) job_wake(j);
        pthread_mutex_unlock(&e->mu);
        return;
    }
    pthread_mutex_lock(&e->mu);
    if (ev->kind == CLLM_EVENT_TEXT) {
        if (!job_put(j, ev->text, ev->len)) {
            snprintf(j->error, sizeof(j->error), "out of memory for the text");
            j->cancel_why = SRV_FINISH_ERROR;
            (void)cllm_engine_cancel(e->eng, j->id);
        }
        if (j->stream) job_wake(j);
        pthread_mutex_unlock(&e->mu);
        return;
    }
    /* CLLM_EVENT_FINISHED */
    const srv_finish why = finish_of(ev, j);
    if (ev->reason == CLLM_STOP_ERROR) {
        snprintf(j->error, sizeof(j->error), "%s", ev->error ? ev->error : "generation failed");
        if (e->pipe && !e->failed) {
            /* the main thread reports it and exits non-zero */
            e->failed = true;
            snprintf(e->failure, sizeof(e->failure), "%s", j->error);
            kill(getpid(), SIGTERM);
        }
    }
    j->n_cached = ev->usage.n_cached;
    j->n_completion = ev->usage.n_completion;
    j->prompt_ms = ev->usage.prompt_ms;
    j->gen_ms = ev->usage.gen_ms;
    j->n_drafted = ev->usage.n_drafted;
    j->n_accepted = ev->usage.n_accepted;
    if (ev->embd) { /* an embedding's vectors */
        const size_t n = (size_t)ev->n_embd_rows * (size_t)cllm_model_n_embd(e->model);
        j->embd = malloc(n * sizeof(float));
        if (j->embd) {
            memcpy(j->embd, ev->embd, n * sizeof(float));
            j->n_embd_rows = ev->n_embd_rows;
        } else {
            snprintf(j->error, sizeof(j->error), "out of memory for the embedding");
        }
    }
    if (ev->usage.started) {
        e->stats.prompt_tokens += ev->usage.n_prompt;
        e->stats.prompt_cached += ev->usage.n_cached;
        e->stats.completion_tokens += ev->usage.n_completion;
    }
    for (srv_job **pp = &e->active; *pp; pp = &(*pp)->active) {
        if (*pp == j) {
            *pp = j->active;
            break;
        }
    }
    if (e->verbose) {
        fprintf(stderr,
                "cllm serve: request %llu: %s: %zu prompt tokens, %zu reused from a cache, %zu "
                "generated, %zu draft tokens verified, %zu kept\n",
                (unsigned long long)j->id, cllm_stop_reason_str(ev->reason), ev->usage.n_prompt,
                ev->usage.n_cached, ev->usage.n_completion, ev->usage.n_drafted,
                ev->usage.n_accepted);
    }
    job_done(e, j, why);
    pthread_mutex_unlock(&e->mu);
}

/* ---- the engine thread -------------------------------------------------- */

/* Under the mutex: moves the queued jobs into the engine, and cancels the
 * jobs in it whose client left or whose time is up (all of them when the
 * server stops). */
static void engine_feed(srv_engine *e) {
    const double now = cllm_time_ms();
    while (e->queue_head) {
        srv_job *j = e->queue_head;
        e->queue_head = j->next;
        if (!e->queue_head) e->queue_tail = NULL;
        j->next = NULL;
        e->n_in_queue--;
        if (j->cancel || e->stop || e->failed) {
            job_done(e, j, SRV_FINISH_CANCELLED);
            continue;
        }
        if (j->deadline_ms > 0 && now > j->deadline_ms) {
            job_done(e, j, SRV_FINISH_TIMEOUT);
            continue;
        }
        j->gp.rp.stop = (const char *const *)j->gp.stop;
        j->gp.rp.n_stop = j->gp.n_stop;
        j->gp.rp.logprobs = j->gp.logprobs ? j->gp.top_logprobs : -1;
        const cllm_status st =
            j->embed
                ? cllm_engine_submit_embed(e->eng, j->prompt, j->n_prompt, j->pooling, j, &j->id)
                : cllm_engine_submit(e->eng, j->prompt, j->n_prompt, &j->gp.rp, j, &j->id);
        if (st != CLLM_OK) {
            snprintf(j->error, sizeof(j->error), "%s", cllm_last_error());
            job_done(e, j, SRV_FINISH_ERROR);
            continue;
        }
        j->state = SRV_JOB_RUNNING;
        j->active = e->active;
        e->active = j;
    }
    for (srv_job *j = e->active; j; j = j->active) {
        if (j->cancel_why != SRV_FINISH_NONE) continue;
        if (j->cancel || e->stop || e->failed)
            j->cancel_why = SRV_FINISH_CANCELLED;
        else if (j->deadline_ms > 0 && now > j->deadline_ms)
            j->cancel_why = SRV_FINISH_TIMEOUT;
        if (j->cancel_why != SRV_FINISH_NONE) (void)cllm_engine_cancel(e->eng, j->id);
    }
    /* the engine gives each idle slot a waiting request at its next step:
     * those count as running already, only the others as queued */
    const int running = cllm_engine_n_running(e->eng), waiting = cllm_engine_n_waiting(e->eng);
    const int idle = e->n_slots - running, admitted = waiting < idle ? waiting : idle;
    e->n_waiting = waiting - admitted;
    e->n_busy = running + admitted;
    e->n_queued = e->n_in_queue + e->n_waiting;
}

static void *engine_main(void *arg) {
    srv_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        engine_feed(e);
        if (!e->active) {
            if (e->stop) break;
            /* idle: wake for new work, or to time out queued jobs */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&e->work, &e->mu, &ts);
            continue;
        }
        pthread_mutex_unlock(&e->mu);
        (void)cllm_engine_step(e->eng); /* its events take the mutex */
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

bool srv_engine_init(srv_engine *e, const cllm_model *model, cllm_pipe *pipe, int n_slots,
                     const cllm_session_params *params, int max_queue, bool verbose) {
    memset(e, 0, sizeof(*e));
    e->pipe = pipe;
    e->max_queue = max_queue;
    e->verbose = verbose;
    cllm_status st;
    if (pipe) {
        /* rank 0's session of --parallel sequences, used as a local one */
        e->model = cllm_pipe_model(pipe);
        st = cllm_engine_new_session(cllm_pipe_session(pipe), on_event, e, &e->eng);
    } else {
        /* one session, a sequence (and KV cache) per slot: a step decodes
         * every busy slot's tokens in one forward pass */
        e->model = model;
        cllm_session_params sp = *params;
        sp.n_seq = n_slots;
        st = cllm_engine_new(model, &sp, on_event, e, &e->eng);
    }
    if (st != CLLM_OK) {
        fprintf(stderr, "cllm serve: %d slots: %s\n", n_slots, cllm_last_error());
        return false;
    }
    cllm_session *s = cllm_engine_session(e->eng);
    e->n_slots = cllm_session_n_seq(s);
    e->n_ctx = cllm_session_n_ctx(s);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work, NULL);
    return true;
}

cllm_memory_report srv_engine_memory(const srv_engine *e) {
    return cllm_session_memory(cllm_engine_session(e->eng));
}

cllm_stream_usage srv_engine_stream(const srv_engine *e) {
    cllm_stream_usage u;
    if (cllm_model_stream_usage(cllm_session_model(cllm_engine_session(e->eng)), &u) != CLLM_OK)
        memset(&u, 0, sizeof(u));
    return u;
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
    cllm_engine_free(e->eng);
    e->eng = NULL;
    e->n_slots = 0;
    pthread_cond_destroy(&e->work);
    pthread_mutex_destroy(&e->mu);
}
