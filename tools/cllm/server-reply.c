/* cllm serve: errors and responses of the HTTP side (server-http.h):
 * OpenAI's error object, CORS headers, whole answers, and the answers an
 * endpoint writes through a srv_writer (srv_http_answer). */
#include "server-http.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail_v(req_err *er, unsigned status, const char *param, const char *code,
                   const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));

static void fail_v(req_err *er, unsigned status, const char *param, const char *code,
                   const char *fmt, va_list ap) {
    er->status = status;
    er->type = status == 401   ? "authentication_error"
               : status == 404 ? "not_found_error"
               : status >= 500 ? "server_error"
                               : "invalid_request_error";
    er->param = param;
    er->code = code;
    vsnprintf(er->msg, sizeof(er->msg), fmt, ap);
}

int srv_fail(req_err *er, unsigned status, const char *param, const char *code, const char *fmt,
             ...) {
    va_list ap;
    va_start(ap, fmt);
    fail_v(er, status, param, code, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- responses ---------------------------------------------------------- */

/* The origin a browser request may be answered to (--cors-origin): "*",
 * the request's Origin when listed, else NULL (no CORS headers). */
const char *srv_cors_origin(const srv_http *h, struct MHD_Connection *c) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    for (int i = 0; i < h->o.n_cors; i++) {
        if (!strcmp(h->o.cors[i], "*")) return "*";
        if (origin && !strcmp(h->o.cors[i], origin)) return origin;
    }
    return NULL;
}

void srv_add_cors(const srv_http *h, struct MHD_Connection *c, struct MHD_Response *r) {
    const char *allow = srv_cors_origin(h, c);
    if (!allow) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", allow);
    if (strcmp(allow, "*") != 0) MHD_add_response_header(r, "Vary", "Origin");
}

enum MHD_Result srv_send_raw(const srv_http *h, struct MHD_Connection *c, unsigned status,
                             const char *type, const char *body, size_t len,
                             const char *retry_after) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    srv_add_cors(h, c, r);
    if (retry_after) MHD_add_response_header(r, "Retry-After", retry_after);
    const enum MHD_Result res = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return res;
}

/* Sends `j` (stolen) as JSON. */
enum MHD_Result srv_send_json(const srv_http *h, struct MHD_Connection *c, unsigned status,
                              json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s) return MHD_NO;
    const enum MHD_Result r = srv_send_raw(h, c, status, "application/json", s, strlen(s), NULL);
    free(s);
    return r;
}

json_t *srv_error_json(const req_err *er) {
    size_t n = 0;
    char *msg = srv_utf8_clean(er->msg, strlen(er->msg), &n);
    json_t *e = json_pack("{s:{s:s?,s:s,s:s?,s:s?}}", "error", "message", msg, "type", er->type,
                          "param", er->param, "code", er->code);
    free(msg);
    return e;
}

enum MHD_Result srv_send_error(const srv_http *h, struct MHD_Connection *c, const req_err *er) {
    json_t *j = srv_error_json(er);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) return MHD_NO;
    const enum MHD_Result r = srv_send_raw(h, c, er->status, "application/json", s, strlen(s),
                                           er->status == 503 ? "1" : NULL);
    free(s);
    return r;
}

/* ---- whole answers waiting for the engine -------------------------------- */

static bool wait_all_done(const srv_wait *w) {
    for (size_t i = 0; i < w->n; i++) {
        if (w->jobs[i]->state != SRV_JOB_DONE) return false;
    }
    return true;
}

/* The engine's wake-up of a job of w (under its mutex): the connection
 * resumes once every job has ended. */
static void wait_wake(void *arg) {
    srv_wait *w = arg;
    if (!w->suspended || !wait_all_done(w)) return;
    w->suspended = false;
    MHD_resume_connection(w->c);
}

void srv_wait_wake(srv_wait *w, srv_job *j) {
    j->wake = wait_wake;
    j->wake_arg = w;
}

enum MHD_Result srv_wait_resume(conn *cn) {
    srv_wait *w = cn->pending;
    srv_engine *e = w->e;
    srv_conns_wait(w->h->conns, w->c, e, w->jobs, w->n);
    pthread_mutex_lock(&e->mu);
    const bool done = wait_all_done(w);
    if (!done && !w->blocked) {
        /* once without suspending: libmicrohttpd (0.9.75) then stops
         * reading the socket and calls again at once; suspended at once,
         * it would read after the resume, and take a half-close for the
         * client gone */
        pthread_mutex_unlock(&e->mu);
        w->blocked = true;
        return MHD_YES;
    }
    if (!done) {
        w->suspended = true;
        MHD_suspend_connection(w->c);
        pthread_mutex_unlock(&e->mu);
        return MHD_YES;
    }
    pthread_mutex_unlock(&e->mu);
    srv_conns_phase(w->h->conns, w->c, SRV_PHASE_SEND);
    cn->pending = NULL;
    return w->done(w);
}

enum MHD_Result srv_wait_start(conn *cn, srv_wait *w) {
    cn->pending = w;
    return srv_wait_resume(cn);
}

/* The error of a job that ended without an answer (NULL: it has one). */
bool srv_job_error(const srv_job *j, req_err *er) {
    switch (j->finish) {
    case SRV_FINISH_TIMEOUT:
        srv_fail(er, 504, NULL, "timeout", "the request took longer than the server's --timeout");
        return true;
    case SRV_FINISH_CANCELLED:
        srv_fail(er, 503, NULL, "cancelled", "the request was cancelled (the server is stopping)");
        return true;
    case SRV_FINISH_ERROR: srv_fail(er, 500, NULL, NULL, "%s", j->error); return true;
    default: return false;
    }
}

enum MHD_Result srv_send_text(const srv_http *h, struct MHD_Connection *c, unsigned status,
                              const char *type, const char *body, size_t len) {
    return srv_send_raw(h, c, status, type, body, len, status == 503 ? "1" : NULL);
}
bool srv_buf_put(srv_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        const size_t cap = (b->len + n + 1) * 2;
        char *nb = realloc(b->data, cap);
        if (!nb) return false;
        b->data = nb;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

bool srv_buf_put_line(srv_buf *b, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    const bool ok = s && srv_buf_put(b, s, strlen(s)) && srv_buf_put(b, "\n", 1);
    free(s);
    return ok;
}

/* A job answered through a srv_writer (srv_http_answer). */
typedef struct answer {
    srv_http *h;
    srv_engine *e;
    srv_job *job;
    struct MHD_Connection *c;
    const srv_writer *w;
    void *ctx;
    json_t *(*er_fn)(const req_err *er);
    const char *type;
    srv_buf out;
    size_t pos;
    bool ended;
    bool suspended; /* a stream's, under the engine's mutex */
    srv_wait wait;  /* a whole answer's */
} answer;

static void answer_free(answer *a) {
    if (a->job) srv_job_release(a->e, a->job);
    if (a->w->free) a->w->free(a->ctx);
    free(a->out.data);
    free(a);
}

static void answer_free_cb(void *cls) { answer_free(cls); }

void srv_job_take(srv_job *j, char **text, size_t *len, json_t **lp) {
    *text = j->out;
    *len = j->out_len;
    *lp = j->logprobs;
    j->out = NULL;
    j->out_len = j->out_cap = 0;
    j->logprobs = NULL;
}

bool srv_job_next(srv_engine *e, srv_job *j, struct MHD_Connection *c, bool *suspended, char **text,
                  size_t *len, json_t **lp, bool *done) {
    pthread_mutex_lock(&e->mu);
    if (j->out_len == 0 && !j->logprobs && j->state != SRV_JOB_DONE) {
        *suspended = true;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&e->mu);
        return false;
    }
    srv_job_take(j, text, len, lp);
    *done = j->state == SRV_JOB_DONE;
    pthread_mutex_unlock(&e->mu);
    return true;
}

/* A stream's wake-up (under the engine's mutex): any event resumes it. */
static void answer_wake(void *arg) {
    answer *a = arg;
    if (!a->suspended) return;
    a->suspended = false;
    MHD_resume_connection(a->c);
}

static ssize_t answer_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    answer *a = cls;
    for (;;) {
        if (a->pos < a->out.len) {
            const size_t n = a->out.len - a->pos < max ? a->out.len - a->pos : max;
            memcpy(buf, a->out.data + a->pos, n);
            a->pos += n;
            return (ssize_t)n;
        }
        if (a->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        a->out.len = a->pos = 0;
        srv_job *j = a->job;
        char *text;
        size_t len;
        json_t *lp;
        bool done;
        if (!srv_job_next(a->e, j, a->c, &a->suspended, &text, &len, &lp, &done)) return 0;
        bool ok = true;
        if (len > 0 || lp) ok = a->w->part(a->ctx, &a->out, text ? text : "", len, lp);
        free(text);
        if (done) {
            req_err er;
            const bool bad = srv_job_error(j, &er);
            ok = a->w->end(a->ctx, &a->out, j, bad ? &er : NULL) && ok;
            a->ended = true;
        }
        if (!ok) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

/* er as the endpoint's JSON, sent with its status. */
static enum MHD_Result answer_error(srv_http *h, struct MHD_Connection *c, const req_err *er,
                                    json_t *(*er_fn)(const req_err *er)) {
    json_t *body = er_fn ? er_fn(er) : srv_error_json(er);
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!s) return MHD_NO;
    const enum MHD_Result r = srv_send_raw(h, c, er->status, "application/json", s, strlen(s),
                                           er->status == 503 ? "1" : NULL);
    free(s);
    return r;
}

/* The whole answer, its job ended. */
static enum MHD_Result answer_done(srv_wait *wt) {
    answer *a = wt->owner;
    srv_job *j = a->job;
    const srv_writer *w = a->w;
    req_err er = {0};
    pthread_mutex_lock(&a->e->mu);
    char *text;
    size_t len;
    json_t *lp;
    srv_job_take(j, &text, &len, &lp);
    pthread_mutex_unlock(&a->e->mu);
    const bool bad = srv_job_error(j, &er);
    bool ok = true;
    if (bad) {
        json_decref(lp);
    } else {
        ok = w->part(a->ctx, &a->out, text ? text : "", len, lp);
    }
    free(text);
    ok = w->end(a->ctx, &a->out, j, bad ? &er : NULL) && ok;
    if (!ok) {
        srv_fail(&er, 500, NULL, NULL, "out of memory");
        json_t *body = a->er_fn ? a->er_fn(&er) : srv_error_json(&er);
        a->out.len = 0;
        ok = srv_buf_put_line(&a->out, body);
    }
    const enum MHD_Result res =
        ok ? srv_send_raw(a->h, a->c, bad ? er.status : 200, a->type, a->out.data, a->out.len, NULL)
           : MHD_NO;
    answer_free(a);
    return res;
}

static void answer_drop(srv_wait *wt) { answer_free(wt->owner); }

enum MHD_Result srv_http_answer(srv_http *h, srv_engine *e, struct MHD_Connection *c, conn *cn,
                                srv_job *j, bool chat, bool stream, const char *type,
                                const srv_writer *w, void *ctx,
                                json_t *(*er_fn)(const req_err *er)) {
    answer *a = calloc(1, sizeof(*a));
    req_err er = {0};
    if (a) {
        *a = (answer){
            .h = h, .e = e, .job = j, .c = c, .w = w, .ctx = ctx, .er_fn = er_fn, .type = type};
        /* before the engine can wake it */
        if (stream) {
            j->wake = answer_wake;
            j->wake_arg = a;
        } else {
            a->wait = (srv_wait){.h = h,
                                 .e = e,
                                 .c = c,
                                 .jobs = &a->job,
                                 .n = 1,
                                 .done = answer_done,
                                 .drop = answer_drop,
                                 .owner = a};
            srv_wait_wake(&a->wait, j);
        }
    }
    if (!a || !srv_engine_submit(e, j)) {
        srv_job_release(e, j); /* never queued: both references */
        srv_job_release(e, j);
        if (w->free) w->free(ctx);
        if (a) {
            srv_fail(&er, 503, NULL, "queue_full",
                     "the server is busy: every slot is taken and the queue is full; retry later");
        } else {
            srv_fail(&er, 500, NULL, NULL, "out of memory");
        }
        free(a);
        return answer_error(h, c, &er, er_fn);
    }
    pthread_mutex_lock(&e->mu);
    e->stats.requests[chat ? 0 : 1]++;
    pthread_mutex_unlock(&e->mu);
    if (!stream) return srv_wait_start(cn, &a->wait);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, answer_read, a, answer_free_cb);
    if (!resp) {
        answer_free(a);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", type);
    srv_add_cors(h, c, resp);
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    const enum MHD_Result res = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return res;
}
