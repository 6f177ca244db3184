/*
 * cllm serve: what the files of the HTTP side share (server.h has what the
 * other endpoint files use). The HTTP side is split by concern:
 *  - server-http.c: the daemon, routing (paths, methods, the key, CORS
 *    preflights, body limits), /v1/models and /metrics;
 *  - server-request.c: a request's fields, its prompt (chat template,
 *    tools) and its tokens;
 *  - server-reply.c: errors and responses, and the answers written through
 *    a srv_writer (srv_http_answer);
 *  - server-openai.c: /v1/chat/completions and /v1/completions (whole or
 *    streamed, one prompt or a list).
 */
#ifndef CLLM_TOOLS_SERVER_HTTP_H
#define CLLM_TOOLS_SERVER_HTTP_H

#include "server.h"

#include "server-conn.h"

#include <microhttpd.h>
#include <stdatomic.h>

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

struct srv_http {
    struct MHD_Daemon *d;
    srv_http_opts o;
    _Atomic(srv_engine *) engine; /* NULL while loading */
    atomic_ulong next_id;
    atomic_int n_open; /* requests received and not yet answered in full */
    srv_conns *conns;  /* the connections' limits */
    /* the longest token piece of the model (0: not known yet): a prompt
     * of n bytes has at least n / max_piece tokens */
    atomic_size_t max_piece;
};

typedef struct reply reply;

/* A whole answer waiting for jobs of the engine: the connection is
 * suspended until every job has ended (the engine's last wake-up of the
 * last one resumes it), then `done` answers. */
typedef struct srv_wait srv_wait;
struct srv_wait {
    srv_http *h;
    srv_engine *e;
    struct MHD_Connection *c;
    srv_job **jobs; /* the owner's, n of them */
    size_t n;
    bool blocked;   /* the handler returned once without an answer */
    bool suspended; /* under the engine's mutex */
    /* every job ended: queues the answer and frees the owner */
    enum MHD_Result (*done)(srv_wait *w);
    /* the connection ended first: frees the owner (its jobs released) */
    void (*drop)(srv_wait *w);
    void *owner;
};

/* What the request's handler keeps between its calls. */
struct srv_conn {
    char *body; /* the body so far */
    size_t len, cap;
    bool answered;     /* a response was queued from the headers alone */
    srv_wait *pending; /* a whole answer the engine has not finished (suspended) */
};
typedef struct srv_conn conn;

/* An OpenAI-style error: {"error": {"message", "type", "param", "code"}}. */
typedef srv_req_err req_err;

/* ---- responses (server-reply.c) ----------------------------------------- */

/* The origin a browser request may be answered to (--cors-origin): "*",
 * the request's Origin when listed, else NULL (no CORS headers). */
const char *srv_cors_origin(const srv_http *h, struct MHD_Connection *c);
/* Adds the CORS headers of the request to r (none when not allowed). */
void srv_add_cors(const srv_http *h, struct MHD_Connection *c, struct MHD_Response *r);
/* Answers body[0, len) with `status`, its content type and Retry-After
 * (NULL: none). */
enum MHD_Result srv_send_raw(const srv_http *h, struct MHD_Connection *c, unsigned status,
                             const char *type, const char *body, size_t len,
                             const char *retry_after);
/* OpenAI's error object of *er (new JSON). */
json_t *srv_error_json(const req_err *er);
/* The error of a job that ended without an answer (false: it has one). */
bool srv_job_error(const srv_job *j, req_err *er);
/* Takes what the job produced (the engine's mutex held). */
void srv_job_take(srv_job *j, char **text, size_t *len, json_t **lp);
/* A stream's next output of job j: taken (with *done, whether j ended)
 * and true; or, when there is none yet and j goes on, the connection c
 * suspended (*suspended set; the engine's next event resumes it, and a
 * client gone shows as a write error then) and false. Takes the engine's
 * mutex. */
bool srv_job_next(srv_engine *e, srv_job *j, struct MHD_Connection *c, bool *suspended, char **text,
                  size_t *len, json_t **lp, bool *done);
/* Job j's wake-ups go to w (before j is submitted). */
void srv_wait_wake(srv_wait *w, srv_job *j);
/* Answers w (its jobs submitted) as cn's pending answer: at once when its
 * jobs have ended, else when the engine resumes the connection. */
enum MHD_Result srv_wait_start(conn *cn, srv_wait *w);
/* The handler called again with cn->pending (resumed, or once more). */
enum MHD_Result srv_wait_resume(conn *cn);

/* ---- request fields (server-request.c) ---------------------------------- */

/* The generation fields of request `o` into *gp (the server's defaults
 * for the rest), "stream" and stream_options' "include_usage". 0 or -1. */
int srv_parse_gen(const srv_http *h, json_t *o, bool chat, int32_t n_vocab, srv_gen_params *gp,
                  bool *stream, bool *usage, req_err *er);
/* A tools' error as a request's (400, or 500 out of memory); -1. */
int srv_tool_error(req_err *er, const srv_tool_err *te);
/* The tokens of a prompt, refused (param named) unless a token of the
 * slot's n_ctx is left free. 0 or -1. */
int srv_tokenize_prompt(srv_http *h, const cllm_model *m, int64_t n_ctx, const char *text,
                        bool add_special, bool parse_special, const char *param, int32_t **ids,
                        size_t *n, req_err *er);

/* ---- OpenAI's completions (server-openai.c) ----------------------------- */

/* POST /v1/chat/completions (chat) or /v1/completions with the body in cn. */
enum MHD_Result srv_completions(srv_http *h, srv_engine *e, struct MHD_Connection *c, conn *cn,
                                bool chat);

#endif /* CLLM_TOOLS_SERVER_HTTP_H */
