/*
 * cllm serve: an OpenAI-compatible HTTP server over one model and N slots.
 *
 * Threads:
 *  - HTTP threads (libmicrohttpd: a few, polling every connection,
 *    server-http.c and the files of server-http.h) parse a request,
 *    render and tokenize its prompt and put a job on the engine thread's
 *    bounded queue; the connection is then
 *    suspended until the job's wake-up (text for a stream, the end for a
 *    whole answer) resumes it. A watcher thread (server-conn.c) enforces
 *    the connections' limits.
 *  - The engine thread (server-thread.c) owns the library's batch engine
 *    (cllm_engine: one session of N sequences, the slots; prefix reuse,
 *    prompt chunks, sampling, stop strings and detokenizing are its own).
 *    It moves queued jobs into the engine, cancels those whose client left
 *    or whose time is up, steps the engine while it has work, and hands
 *    each event (a token's log-probabilities, text, the end) to its job.
 *    Under mpirun the layers are spread over the ranks (cllm-pipeline.h)
 *    and the engine runs over the pipeline's session on rank 0.
 *  - The main thread (cmd-serve.c) loads the model, starts both, and waits
 *    for SIGINT/SIGTERM.
 *
 * Everything a job shares between an HTTP thread and the engine thread is
 * guarded by the engine's mutex; a job is freed when both sides have
 * released it. Locks: the watcher's before the engine's, never the
 * reverse; libmicrohttpd's resume is called under the engine's.
 */
#ifndef CLLM_TOOLS_SERVER_H
#define CLLM_TOOLS_SERVER_H

#include "cllm-pipeline.h"
#include "cllm.h"

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Most stop strings per request, their longest length in bytes, and most
 * top_logprobs per token: the engine's limits. */
#define SRV_MAX_STOP         CLLM_ENGINE_MAX_STOP
#define SRV_MAX_STOP_LEN     CLLM_ENGINE_MAX_STOP_LEN
#define SRV_MAX_TOP_LOGPROBS CLLM_ENGINE_MAX_TOP_LOGPROBS

/* The generation settings of one request. */
typedef struct srv_gen_params {
    /* max_tokens, sampling (penalties, ignore_eos included); its stop
     * strings are set from stop[] when the job is submitted */
    cllm_request_params rp;
    char *stop[SRV_MAX_STOP]; /* owned (free) */
    int n_stop;
    bool logprobs;         /* the answer carries log-probabilities */
    int top_logprobs;      /* 0..SRV_MAX_TOP_LOGPROBS alternatives each */
    cllm_logit_bias *bias; /* owned (free): rp.sampling.logit_bias */
    char *grammar;         /* owned (free): rp.sampling.grammar (GBNF), or NULL */
    int32_t *triggers;     /* owned (free): rp.sampling.grammar_trigger_tokens, or NULL */
} srv_gen_params;

typedef enum srv_finish {
    SRV_FINISH_NONE = 0, /* still running */
    SRV_FINISH_STOP,     /* an end-of-generation token or a stop string */
    SRV_FINISH_LENGTH,   /* max_tokens or a full context */
    SRV_FINISH_CANCELLED,
    SRV_FINISH_TIMEOUT,
    SRV_FINISH_ERROR,
    SRV_FINISH_COUNT
} srv_finish;

typedef enum srv_job_state { SRV_JOB_QUEUED = 0, SRV_JOB_RUNNING, SRV_JOB_DONE } srv_job_state;

/* One request, from the HTTP thread that made it to the engine and back. */
typedef struct srv_job {
    /* set by the HTTP thread before it is queued, then read-only */
    int32_t *prompt; /* owned */
    size_t n_prompt;
    srv_gen_params gp;
    double deadline_ms; /* cllm_time_ms() past which it is cancelled; 0: none */
    bool stream;        /* the reader takes text as it comes (else: once, at the end) */
    bool embed;         /* an embedding (server-embed.c), pooled with `pooling` */
    cllm_pooling pooling;

    /* the engine thread's */
    uint64_t id;            /* in the engine, once submitted */
    srv_finish cancel_why;  /* why the engine thread cancelled it */
    struct srv_job *active; /* the next job in the engine */

    /* under the engine's mutex */
    srv_job_state state;
    srv_finish finish;
    bool cancel; /* set by the HTTP side: the client left */
    char *out;   /* text produced and not yet taken (valid UTF-8) */
    size_t out_len, out_cap;
    json_t *logprobs;    /* array of chat-style entries not yet taken, or NULL */
    size_t n_cached;     /* prompt tokens reused from the slot's cache */
    size_t n_completion; /* tokens generated */
    double prompt_ms;    /* forward passes that read its prompt (shared with others) */
    double gen_ms;       /* forward passes that decoded its tokens */
    size_t n_drafted;    /* speculative decoding: draft tokens verified */
    size_t n_accepted;   /* of those, kept */
    char error[256];     /* with SRV_FINISH_ERROR */
    float *embd;         /* an embedding's vectors (owned), n_embd_rows x n_embd */
    int64_t n_embd_rows;
    int refs; /* 2 while both sides hold it */
    /* called (with the mutex held, by the engine thread) when something
     * above changed: the HTTP side resumes its connection; NULL: none.
     * srv_job_release clears it. */
    void (*wake)(void *arg);
    void *wake_arg;
    struct srv_job *next;
} srv_job;

/* Counters of /metrics (under the engine's mutex). */
typedef struct srv_stats {
    uint64_t requests[2];   /* [0] chat, [1] completions: accepted into the queue */
    uint64_t rejected;      /* 4xx/5xx answered before the queue */
    uint64_t queue_full;    /* 503 for a full queue */
    uint64_t cancelled;     /* client gone, timeout or shutdown */
    uint64_t prompt_tokens; /* prompt tokens of finished jobs */
    uint64_t prompt_cached; /* of those, reused from a cache */
    uint64_t completion_tokens;
} srv_stats;

/* The engine thread, the library's engine and the queue that feeds it. */
typedef struct srv_engine {
    const cllm_model *model;
    cllm_engine *eng; /* one session, a sequence (KV cache) per slot */
    int n_slots;
    int64_t n_ctx;
    int max_queue;

    pthread_mutex_t mu;
    pthread_cond_t work;              /* a job was queued or cancelled, or stop was set */
    srv_job *queue_head, *queue_tail; /* not yet in the engine */
    int n_in_queue;
    int n_waiting; /* in the engine, beyond what its idle slots take at the next step */
    int n_queued;  /* n_in_queue + n_waiting: against max_queue */
    int n_busy;    /* slots running a job */
    bool stop;
    srv_stats stats;
    srv_job *active; /* in the engine (the engine thread's list) */
    /* under mpirun: the pipeline across the ranks, whose session on rank 0
     * the engine runs over; a failure of a request there is the
     * pipeline's, fatal: the engine thread records it, raises SIGTERM and
     * takes no more work */
    cllm_pipe *pipe;
    bool failed;
    char failure[512];
    pthread_t thread;
    bool started;
    bool verbose;
} srv_engine;

/* The engine over `model` with a session of n slots made with `params`, or
 * (pipe not NULL) over the pipeline's session, which holds the model;
 * false after printing the error (nothing left allocated). */
bool srv_engine_init(srv_engine *e, const cllm_model *model, cllm_pipe *pipe, int n_slots,
                     const cllm_session_params *params, int max_queue, bool verbose);
/* Starts the engine thread. */
bool srv_engine_start(srv_engine *e);
/* Cancels every job and stops the thread (new jobs are refused). */
void srv_engine_stop(srv_engine *e);
/* Stops it (if running) and frees the engine. */
void srv_engine_free(srv_engine *e);
/* Memory of all slots together (weights once). */
cllm_memory_report srv_engine_memory(const srv_engine *e);
/* The streamed layers' reads so far (all zero when nothing is streamed). */
cllm_stream_usage srv_engine_stream(const srv_engine *e);

/* A new job owning `prompt` and the strings of `gp`; NULL when out of memory
 * (then they are freed). */
srv_job *srv_job_new(int32_t *prompt, size_t n_prompt, srv_gen_params *gp, double deadline_ms);
/* Queues the job for a slot; false (the job untouched) when the queue is full
 * or the engine stops. */
bool srv_engine_submit(srv_engine *e, srv_job *job);
/* The HTTP side lets go of the job (cancelling it if it still runs). */
void srv_job_release(srv_engine *e, srv_job *job);
/* Frees the strings, the logit bias and the grammar of gp. */
void srv_gen_params_free(srv_gen_params *gp);

/* The longest valid-UTF-8 rendering of s[0, n): invalid bytes become U+FFFD;
 * a new string (free) of length *out_len; NULL when out of memory. For the
 * JSON strings of token pieces and messages (the engine's text is valid
 * UTF-8 already). */
char *srv_utf8_clean(const char *s, size_t n, size_t *out_len);

/* ---- tool calls (server-tools.c) ---------------------------------------- */

typedef enum srv_tool_choice {
    SRV_TOOL_AUTO = 0, /* the model may call a tool or answer */
    SRV_TOOL_NONE,     /* no tools: they are not shown to the model */
    SRV_TOOL_REQUIRED, /* a call of some tool, forced by a grammar */
    SRV_TOOL_NAMED,    /* a call of `named`, forced by a grammar */
    SRV_TOOL_CHOICE_COUNT
} srv_tool_choice;

/* How the chat template in use writes a call, and so how the model does
 * (srv_tools_format). Every form also reads a whole answer that is one
 * JSON call or a list of them (a control token such as Llama 3's
 * <|python_tag|> or Mistral's [TOOL_CALLS] is not in the generated text). */
typedef enum srv_tool_format {
    SRV_TOOLFMT_GENERIC = 0,  /* the whole answer: {"name", "arguments"} or a list of them */
    SRV_TOOLFMT_HERMES,       /* <tool_call>{"name", "arguments"}</tool_call>, one or more */
    SRV_TOOLFMT_LLAMA3,       /* {"name", "parameters"} (after <|python_tag|>), one call */
    SRV_TOOLFMT_MISTRAL,      /* [TOOL_CALLS][{"name", "arguments"}, ...] */
    SRV_TOOLFMT_MISTRAL_ARGS, /* [TOOL_CALLS]name[ARGS]{...}, one or more (Mistral since v0.3) */
    SRV_TOOLFMT_XML, /* <tool_call><function=name><parameter=p>value</parameter></function> */
    SRV_TOOLFMT_COUNT
} srv_tool_format;

/* The tools of a chat request (borrowed from its JSON). */
typedef struct srv_tools {
    json_t *tools; /* the "tools" array, or NULL: none (or tool_choice none) */
    srv_tool_choice choice;
    const char *named;      /* SRV_TOOL_NAMED: the function */
    bool parallel;          /* parallel_tool_calls (default true) */
    srv_tool_format format; /* the template's (srv_tools_format), set by the caller */
} srv_tools;

/* What a request did wrong (a 400), or out of memory (code NULL). */
typedef struct srv_tool_err {
    const char *param, *code;
    char msg[400];
} srv_tool_err;

/* Reads and checks "tools", "tool_choice" and "parallel_tool_calls" of
 * request `o` into *t: 0, or -1 after filling *te. */
int srv_tools_parse(json_t *o, srv_tools *t, srv_tool_err *te);
/* The "function" object of the tool called `name`, or NULL. */
json_t *srv_tools_find(const srv_tools *t, const char *name);
/* The form of a call in chat template `tmpl` (NULL: none): its text names
 * <function= and <parameter= (XML: Qwen3-Coder, GLM), <tool_call> (Hermes,
 * Qwen), [TOOL_CALLS] with [ARGS] (Mistral since v0.3) or without (older
 * Mistral), or <|python_tag|> or Llama 3's headers with "parameters"; else
 * the generic form. */
srv_tool_format srv_tools_format(const char *tmpl);
/* A GBNF grammar (free) that allows only calls of the tools (their
 * parameters' schemas) in t->format: each in <tool_call> tags (Hermes;
 * several blocks with parallel calls), the JSON {"name", "parameters"}
 * (Llama 3), a list of {"name", "arguments"} (Mistral), name[ARGS]{...}
 * after an optional [TOOL_CALLS] (newer Mistral), <tool_call> blocks of
 * <function=name> with a <parameter=p> per property (XML: a string
 * property's value is text without "</", another's JSON of its schema), or
 * {"name", "arguments"} or, with parallel calls, a list of them (generic);
 * its start rule in *root. With tool_choice required or named it forces a
 * call; with auto it is the lazy grammar that srv_tools_triggers' words
 * turn on (the tagged forms as above, Mistral's list after an optional
 * [TOOL_CALLS]). NULL without tools or with tool_choice none, or on
 * failure (te->code set; NULL code: out of memory). */
char *srv_tools_grammar(const srv_tools *t, const char **root, srv_tool_err *te);
/* The words that open a call in format f under tool_choice auto (the lazy
 * grammar's triggers, constant strings; a grammar that begins with them):
 * <tool_call> (Hermes, XML), [TOOL_CALLS] (Mistral), {"name" (Llama 3 and
 * generic; [{"name" too with parallel calls in the generic form). Their
 * number; *control the text of a control token that opens a call too
 * (Llama 3's <|python_tag|>, Mistral's [TOOL_CALLS]), or NULL. */
int srv_tools_triggers(srv_tool_format f, bool parallel, const char *const **words,
                       const char **control);
/* Sets gp's grammar to srv_tools_grammar's (an error when it fails: -1
 * after filling *te); with tool_choice auto it is lazy: the triggers of
 * srv_tools_triggers, and the control token as a trigger token when model
 * m (may be NULL) has it as one token without text. 0 on success. */
int srv_tools_set_grammar(const srv_tools *t, const cllm_model *m, srv_gen_params *gp,
                          srv_tool_err *te);
/* The request's messages as the chat template takes them (new array in
 * *out): roles checked, contents as text, tool_calls with arguments as
 * objects, tool_call_id and name kept; when the template knows no tools
 * (!template_has_tools), the tools are described in the system message.
 * 0, or -1 after filling *te. */
int srv_tools_messages(json_t *msgs, const srv_tools *t, bool template_has_tools, json_t **out,
                       srv_tool_err *te);
/* The tool calls in generated text[0, len) written in format f: the
 * tagged blocks of Hermes, XML (a parameter's value read as JSON when it
 * is, else as a string, and always as a string where the request's `tools`
 * array, or NULL, types the parameter so) or Mistral (text before them is content), or,
 * when `start` (text is the answer from its beginning), the whole text as
 * one call or a list of them (a ```json fence around it allowed), or
 * several calls one after another (newer Mistral: name{...} too, its
 * control tokens not in the text). A new array of OpenAI tool_calls
 * (arguments as JSON text, new ids), with the length of the text before
 * them in *content_len; NULL when the text holds no calls. */
json_t *srv_tools_extract(srv_tool_format f, const json_t *tools, const char *text, size_t len,
                          bool start, size_t *content_len);
/* How much of an answer's text so far, text[0, len), cannot be part of a
 * call in format f and may be streamed as content now: all of it once it
 * begins with something else than a call (and, for a tagged format, up to
 * where a tag may begin, trailing white space held back). Never less for a
 * longer text with the same beginning. */
size_t srv_tools_plain(srv_tool_format f, const char *text, size_t len);

/* ---- HTTP (server-http.c) ----------------------------------------------- */

#define SRV_MAX_NAMES 16

/* What one client may hold of the server (server-conn.c, docs/security.md). */
typedef struct srv_limits {
    int max_conns;      /* connections open at once (--max-connections) */
    int max_per_client; /* of them from one address (--max-conn-per-ip) */
    int threads;        /* HTTP polling threads (--http-threads) */
    double header_s;    /* a request's headers arrive within this (--header-timeout) */
    double idle_s;      /* a connection that moves no byte for this long is closed
                         * (--idle-timeout); not while it waits for the engine */
    double min_rate;    /* past header_s, a body arrives at this many bytes/s at
                         * least (--min-body-rate) */
    double read_s;      /* a request's headers and body within this; 0: no such
                         * limit (--timeout) */
} srv_limits;

typedef struct srv_http_opts {
    const char *host;
    int port;
    const char *api_key; /* NULL: none */
    size_t max_body;
    double timeout_s; /* 0: none */
    srv_limits lim;
    const char *model_id;
    /* more names the model answers to (--alias); with strict_names only
     * model_id and these are accepted, else any name is */
    const char *aliases[SRV_MAX_NAMES];
    int n_aliases;
    bool strict_names;
    /* origins a browser may call from (--cors-origin; "*": any); none: no
     * CORS headers, and OPTIONS is not answered */
    const char *cors[SRV_MAX_NAMES];
    int n_cors;
    /* for fields a request leaves out (no stops; its grammar, from
     * --grammar or --json-schema, is not owned: each request copies it) */
    srv_gen_params defaults;
    bool seed_given; /* defaults.sp.seed is the server's --seed */
    /* --chat-template (a built-in format's name) or --chat-template-file
     * (Jinja source); NULL: the model's own template */
    const char *chat_style, *chat_template;
    bool metrics;    /* GET /metrics answers (--metrics); else 404 */
    bool slots;      /* GET /slots answers (--slots); else 404 */
    bool embeddings; /* POST /v1/embeddings answers (--embeddings); else 501 */
    bool webui;      /* GET / answers the chat page (default; --no-webui: 404) */
    int pooling;     /* the embeddings' cllm_pooling (--pooling); -1: the model's */
    /* the model's file: its size and time for /api/tags and /api/show */
    const char *model_path;
    bool verbose;
} srv_http_opts;

typedef struct srv_http srv_http;
/* A request on a connection (its body, its pending answer). */
typedef struct srv_conn srv_conn;

/* Opens the port (503 on every endpoint until srv_http_ready); *port_out gets
 * the port bound. NULL after printing why. */
srv_http *srv_http_start(const srv_http_opts *opts, int *port_out);
/* The speculative decoding of every request (the draft model made once the
 * engine is known); before srv_http_ready. */
void srv_http_set_spec(srv_http *h, const cllm_spec_params *spec);
/* From now on requests go to `e`. */
void srv_http_ready(srv_http *h, srv_engine *e);
/* Stops accepting connections (those open finish). */
void srv_http_quiesce(srv_http *h);
/* Waits until every request received has been answered (the engine
 * stopped: its jobs ended), at most max_s seconds. */
void srv_http_drain(srv_http *h, double max_s);
/* Closes the port and waits for every connection thread. NULL does nothing. */
void srv_http_stop(srv_http *h);

/* ---- what the endpoints share (server-reply.c, server-request.c) -------- */

/* A request's error: its HTTP status, and OpenAI's {"error": {"message",
 * "type", "param", "code"}} fields (other formats take the message). */
typedef struct srv_req_err {
    unsigned status;
    const char *type, *param, *code;
    char msg[512];
    char param_buf[72]; /* param when it is a name from the request */
} srv_req_err;

/* Fills *er (status, param and code may be NULL); returns -1. */
int srv_fail(srv_req_err *er, unsigned status, const char *param, const char *code, const char *fmt,
             ...) __attribute__((format(printf, 5, 6)));
/* The server's options (model names, defaults). */
const srv_http_opts *srv_http_options(const srv_http *h);
/* Whether `name` is one the server answers to (any, unless
 * --strict-model-names, when `any`). */
bool srv_name_served(const srv_http *h, const char *name, bool any);
/* Answers `body` (len bytes) with `status` and the content type; `j`
 * (stolen) as compact JSON. */
enum MHD_Result srv_send_text(const srv_http *h, struct MHD_Connection *c, unsigned status,
                              const char *type, const char *body, size_t len);
enum MHD_Result srv_send_json(const srv_http *h, struct MHD_Connection *c, unsigned status,
                              json_t *j);
/* Answers OpenAI's error object for *er. */
enum MHD_Result srv_send_error(const srv_http *h, struct MHD_Connection *c, const srv_req_err *er);
/* The request body as a JSON object (NULL after filling *er). */
json_t *srv_parse_body(const char *body, size_t len, srv_req_err *er);

/* Request fields of object `o`: 0 when absent or null, 1 when read into
 * *out, -1 after filling *er (out of [lo, hi], wrong type). */
int srv_get_num(json_t *o, const char *key, double lo, double hi, double *out, srv_req_err *er);
int srv_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out,
                srv_req_err *er);
int srv_get_bool(json_t *o, const char *key, bool *out, srv_req_err *er);
/* "stop" of `o` (a string or an array of them) appended to gp->stop. */
int srv_get_stop(json_t *o, srv_gen_params *gp, srv_req_err *er);
/* The server's defaults in *gp (no stops, bias or grammar owned; a random
 * seed unless --seed). */
void srv_gen_defaults(const srv_http *h, srv_gen_params *gp);
/* The grammar of a JSON Schema (a JSON value) as gp's, checked against the
 * model's n_vocab tokens; `param` names the field in errors. 0 or -1. */
int srv_schema_grammar(json_t *schema, const char *param, int32_t n_vocab, srv_gen_params *gp,
                       srv_req_err *er);
/* The form of tool calls of the server's chat template (a built-in style:
 * the generic form). */
srv_tool_format srv_http_tool_format(const srv_http *h, const cllm_model *m);
/* The prompt text of request `o`'s "messages" (OpenAI's shape) through the
 * chat template, with the tools of *t (none: zeroed); *bos: whether the
 * text begins with the BOS token's text. 0 or -1. */
int srv_chat_prompt(const srv_http *h, const cllm_model *m, json_t *o, const srv_tools *t,
                    char **text, bool *bos, srv_req_err *er);
/* text's tokens in *ids (malloc) and *n. 0 or -1. */
int srv_tokenize(const cllm_model *m, const char *text, bool add_special, bool parse_special,
                 int32_t **ids, size_t *n, srv_req_err *er);

/* Bytes of an answer. */
typedef struct srv_buf {
    char *data;
    size_t len, cap;
} srv_buf;

/* Appends s[0, n); false when out of memory. */
bool srv_buf_put(srv_buf *b, const char *s, size_t n);
/* Appends `j` (stolen) as compact JSON and a newline (NDJSON). */
bool srv_buf_put_line(srv_buf *b, json_t *j);

/* How an endpoint writes the answer of a job: whole (one call of each,
 * text all at once) or streamed (part as text comes, then end). */
typedef struct srv_writer {
    /* text (valid UTF-8, maybe empty) and its log-probability entries
     * (stolen, or NULL) */
    bool (*part)(void *ctx, srv_buf *out, const char *text, size_t len, json_t *logprobs);
    /* the job ended: er is its error (a whole answer is then sent with
     * er->status), or NULL */
    bool (*end)(void *ctx, srv_buf *out, const srv_job *j, const srv_req_err *er);
    void (*free)(void *ctx); /* ctx (optional: NULL) */
} srv_writer;

/* Submits job `j` (as chat or text completion in the counters) and answers
 * with what `w` writes of it, as `type`; takes j and ctx (freed however it
 * ends). Until the job has something to send (a stream) or has ended (a
 * whole answer), the connection is suspended, holding no thread. A full
 * queue is a 503 with er_fn's body; er_fn (NULL: OpenAI's) renders an
 * error as JSON. */
enum MHD_Result srv_http_answer(srv_http *h, srv_engine *e, struct MHD_Connection *c, srv_conn *cn,
                                srv_job *j, bool chat, bool stream, const char *type,
                                const srv_writer *w, void *ctx,
                                json_t *(*er_fn)(const srv_req_err *er));

/* ---- the chat page (server-webui.c) ------------------------------------- */

/* Whether `url` is the chat page's: / or /webui/... (with the page on). */
bool srv_webui_path(const char *url);
/* Answers GET (or HEAD) of the page's file `url` with its
 * Content-Security-Policy; 404 for a file it does not have, 405 for
 * another method. Asks no API key: the page holds no data (its requests
 * carry the key the user enters). */
enum MHD_Result srv_webui(const srv_http *h, struct MHD_Connection *c, const char *url,
                          const char *method);

/* ---- llama-server's endpoints (server-llama.c) -------------------------- */

/* Answers POST /tokenize, /detokenize, /apply-template, GET /props or
 * /slots (url; the method checked). */
enum MHD_Result srv_llama(srv_http *h, srv_engine *e, struct MHD_Connection *c, const char *url,
                          const char *body, size_t len);

/* ---- Ollama's API (server-ollama.c) ------------------------------------- */

/* Answers a request under /api/ (Ollama's endpoints). */
enum MHD_Result srv_ollama(srv_http *h, srv_engine *e, struct MHD_Connection *c, srv_conn *cn,
                           const char *url, const char *method, const char *body, size_t len);

/* ---- embeddings (server-embed.c) ---------------------------------------- */

/* POST /v1/embeddings with cn's body: a job per input, the connection
 * suspended until they have all ended; then the answer (OpenAI's shape, or
 * an error object) with its HTTP status goes to `fin` (NULL: sent as it
 * is; 501 when the server runs without --embeddings), which takes it (NULL
 * when out of memory) and queues the response. */
typedef enum MHD_Result (*srv_embed_fin)(srv_http *h, struct MHD_Connection *c, json_t *answer,
                                         unsigned status, void *ctx);
enum MHD_Result srv_embeddings(srv_http *h, srv_engine *e, struct MHD_Connection *c, srv_conn *cn,
                               const char *body, size_t len, srv_embed_fin fin, void *fin_ctx,
                               void (*fin_free)(void *ctx));

#endif /* CLLM_TOOLS_SERVER_H */
