/*
 * cllm serve (the executable is argv[1]) end to end, over loopback only,
 * each server on a port of its own choosing (--port 0) and stopped here:
 *
 *  - stories260K: /health, /v1/models, completions whole and streamed (SSE
 *    framing, include_usage, the streamed text equal to the whole one),
 *    greedy text equal to `cllm run --temp 0`, stop strings across tokens
 *    (whole and streamed), and every bad input with its status and error
 *    object; the server keeps serving;
 *  - SmolLM2 (a ChatML template): chat equal to `cllm run --temp 0 --chat`,
 *    a second turn served from the cache (cached_tokens), a prompt that
 *    shares a beginning with a slot's cache (its rows reused, the answer
 *    unchanged), the API key, a
 *    client that leaves mid-stream (its slot is freed), a load test (8
 *    streaming clients x 27 requests over 2 slots, some cancelled: every
 *    greedy answer equal to `cllm run --temp 0 --chat`'s; three rounds,
 *    the server's resident memory flat across them), a full queue (503,
 *    Retry-After),
 *    --timeout, and SIGTERM with a request in flight (exit 0).
 */
#include "common/check.h"
#include "common/json.h"
#include "common/refs.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

static const char *g_cllm;
static const char *g_key_header = "";
static bool g_ipv6; /* connect to ::1 instead of 127.0.0.1 */

/* ---- a server ----------------------------------------------------------- */

typedef struct server {
    pid_t pid;
    int port;
    int out_fd;
} server;

/* VmRSS of process pid in KiB, 0 if unknown. */
static long rss_kib(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kib = 0;
    while (f && fgets(line, sizeof(line), f)) {
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
    }
    if (f) fclose(f);
    return kib;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- HTTP over a raw socket --------------------------------------------- */

typedef struct resp {
    int status;
    char *head; /* status line and headers */
    char *body; /* de-chunked, NUL-terminated */
    size_t body_len;
} resp;

static void resp_free(resp *r) {
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof(*r));
}

static int connect_to(int port) {
    const int fd = socket(g_ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
    a6.sin6_addr = in6addr_loopback;
    struct timeval tv = {.tv_sec = 120};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    const int rc = g_ipv6 ? connect(fd, (struct sockaddr *)&a6, sizeof(a6))
                          : connect(fd, (struct sockaddr *)&a, sizeof(a));
    if (rc != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool send_all(int fd, const char *s, size_t n) {
    while (n > 0) {
        const ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k <= 0) return false;
        s += k, n -= (size_t)k;
    }
    return true;
}

/* Sends a request (Connection: close); body may be NULL. */
static int send_request(int port, const char *method, const char *path, const char *headers,
                        const char *body, size_t body_len) {
    const int fd = connect_to(port);
    if (fd < 0) return -1;
    char head[2048];
    const int n =
        snprintf(head, sizeof(head),
                 "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s%s"
                 "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                 method, path, g_key_header, headers ? headers : "", body ? body_len : (size_t)0);
    if (!send_all(fd, head, (size_t)n) || (body && !send_all(fd, body, body_len))) {
        close(fd);
        return -1;
    }
    return fd;
}

static void dechunk(resp *r, char *raw, size_t n) {
    r->body = malloc(n + 1);
    size_t o = 0, i = 0;
    while (i < n) {
        const unsigned long len = strtoul(raw + i, NULL, 16);
        char *crlf = strstr(raw + i, "\r\n");
        if (!crlf || len == 0) break;
        i = (size_t)(crlf - raw) + 2;
        const size_t take = i + len <= n ? len : n - i;
        memcpy(r->body + o, raw + i, take);
        o += take;
        i += take + 2;
    }
    r->body[o] = '\0';
    r->body_len = o;
}

/* Reads the whole response of fd (until the server closes it). */
static bool read_response(int fd, resp *r) {
    memset(r, 0, sizeof(*r));
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 4096 > cap) buf = realloc(buf, cap *= 2);
        const ssize_t k = recv(fd, buf + n, cap - n - 1, 0);
        if (k <= 0) break;
        n += (size_t)k;
    }
    close(fd);
    buf[n] = '\0';
    char *sep = strstr(buf, "\r\n\r\n");
    if (!sep || sscanf(buf, "HTTP/1.%*d %d", &r->status) != 1) {
        free(buf);
        return false;
    }
    r->head = strndup(buf, (size_t)(sep - buf) + 2);
    char *body = sep + 4;
    const size_t body_n = n - (size_t)(body - buf);
    if (strcasestr(r->head, "Transfer-Encoding: chunked")) {
        dechunk(r, body, body_n);
    } else {
        r->body = strndup(body, body_n);
        r->body_len = body_n;
    }
    free(buf);
    return true;
}

static resp http(int port, const char *method, const char *path, const char *body) {
    resp r = {0};
    const int fd = send_request(port, method, path, NULL, body, body ? strlen(body) : 0);
    if (fd < 0 || !read_response(fd, &r)) r.status = -1;
    if (!r.body) r.body = calloc(1, 1);
    return r;
}

/* A server of `cllm serve ARGS... --port 0`, ready (/health 200). */
static bool server_start(server *s, const char *const *args) {
    int p[2];
    if (pipe(p) != 0) return false;
    const char *argv[64];
    int n = 0;
    argv[n++] = g_cllm;
    argv[n++] = "serve";
    for (int i = 0; args[i] && n < 60; i++) argv[n++] = args[i];
    argv[n++] = "--port";
    argv[n++] = "0";
    argv[n] = NULL;
    s->pid = fork();
    if (s->pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execv(g_cllm, (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    s->out_fd = p[0];
    s->port = 0;
    char line[512];
    size_t len = 0;
    while (len < sizeof(line) - 1) {
        const ssize_t k = read(p[0], line + len, 1);
        if (k <= 0) break;
        if (line[len++] == '\n') {
            line[len] = '\0';
            const char *at = strstr(line, "listening on http://");
            const char *colon = at ? strrchr(at, ':') : NULL;
            if (colon) {
                s->port = atoi(colon + 1);
                break;
            }
            len = 0;
        }
    }
    if (s->port <= 0) return false;
    for (double t0 = now_s(); now_s() - t0 < 120;) {
        resp r = http(s->port, "GET", "/health", NULL);
        const int st = r.status;
        resp_free(&r);
        if (st == 200) return true;
        usleep(50 * 1000);
    }
    return false;
}

/* Sends `sig`, waits (at most 30 s) and returns the exit status (-1: killed
 * or hung). */
static int server_stop(server *s, int sig) {
    kill(s->pid, sig);
    int st = 0;
    for (double t0 = now_s(); now_s() - t0 < 30;) {
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            close(s->out_fd);
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
        usleep(20 * 1000);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, &st, 0);
    close(s->out_fd);
    return -1;
}

/* ---- responses ---------------------------------------------------------- */

/* The text of a whole completion (chat or not); a new string or NULL. */
static char *whole_text(const resp *r, char *finish, size_t finish_size) {
    json *doc = json_parse(r->body);
    const json *ch = json_at(json_get(doc, "choices"), 0);
    const json *msg = json_get(ch, "message");
    const char *t = msg ? json_str(json_get(msg, "content")) : json_str(json_get(ch, "text"));
    char *out = t ? strdup(t) : NULL;
    if (finish) {
        const char *f = json_str(json_get(ch, "finish_reason"));
        snprintf(finish, finish_size, "%s", f ? f : "");
    }
    json_free(doc);
    return out;
}

typedef struct sse {
    bool framed; /* every event "data: ...\n\n", the last "data: [DONE]" */
    int n_events;
    char text[16384]; /* the deltas together */
    char finish[32];
    bool has_usage; /* a last chunk with choices [] and usage */
    long cached, prompt_tokens;
    bool error; /* an error event */
} sse;

static void parse_sse(const char *body, sse *s) {
    memset(s, 0, sizeof(*s));
    s->framed = true;
    s->cached = s->prompt_tokens = -1;
    const char *p = body;
    bool done = false;
    while (*p) {
        const char *end = strstr(p, "\n\n");
        if (strncmp(p, "data: ", 6) != 0 || !end || done) {
            s->framed = false;
            break;
        }
        s->n_events++;
        char *data = strndup(p + 6, (size_t)(end - p - 6));
        if (!strcmp(data, "[DONE]")) {
            done = true;
        } else {
            json *doc = json_parse(data);
            if (!doc) s->framed = false;
            if (json_get(doc, "error")) s->error = true;
            const json *ch = json_at(json_get(doc, "choices"), 0);
            const json *delta = json_get(ch, "delta");
            const char *t =
                delta ? json_str(json_get(delta, "content")) : json_str(json_get(ch, "text"));
            if (t) strncat(s->text, t, sizeof(s->text) - strlen(s->text) - 1);
            const char *f = json_str(json_get(ch, "finish_reason"));
            if (f) snprintf(s->finish, sizeof(s->finish), "%s", f);
            const json *u = json_get(doc, "usage");
            if (u && u->kind == JSON_OBJ && json_len(json_get(doc, "choices")) == 0) {
                s->has_usage = true;
                s->prompt_tokens = (long)json_num(json_get(u, "prompt_tokens"));
                s->cached =
                    (long)json_num(json_get(json_get(u, "prompt_tokens_details"), "cached_tokens"));
            }
            json_free(doc);
        }
        free(data);
        p = end + 2;
    }
    if (!done) s->framed = false;
}

/* The status, and the error object's code (or "") of a response. */
static bool is_error(const resp *r, int status, const char *code) {
    json *doc = json_parse(r->body);
    const json *e = json_get(doc, "error");
    const char *c = json_str(json_get(e, "code"));
    const bool ok = r->status == status && e && json_str(json_get(e, "message")) &&
                    json_str(json_get(e, "type")) && (!code || (c && !strcmp(c, code)));
    json_free(doc);
    if (!ok) fprintf(stderr, "  got %d %s (wanted %d %s)\n", r->status, r->body, status, code);
    return ok;
}

static long usage_field(const resp *r, const char *field) {
    json *doc = json_parse(r->body);
    const json *u = json_get(doc, "usage");
    long v = !strcmp(field, "cached_tokens")
                 ? (long)json_num(json_get(json_get(u, "prompt_tokens_details"), field))
                 : (long)json_num(json_get(u, field));
    if (!json_get(u, "total_tokens")) v = -1;
    json_free(doc);
    return v;
}

static double metric(int port, const char *name) {
    resp r = http(port, "GET", "/metrics", NULL);
    const char *at = strstr(r.body, name);
    while (at && at > r.body && at[-1] != '\n') at = strstr(at + 1, name);
    const double v = at ? atof(at + strlen(name)) : -1;
    resp_free(&r);
    return v;
}

/* The text `cllm run ARGS --json` generates. */
static char *run_text(const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "'%s' run %s --json 2>/dev/null", g_cllm, args);
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    char *buf = calloc(1, 1 << 20);
    const size_t n = fread(buf, 1, (1 << 20) - 1, p);
    pclose(p);
    buf[n] = '\0';
    json *doc = json_parse(buf);
    const char *t = json_str(json_get(doc, "text"));
    char *out = t ? strdup(t) : NULL;
    json_free(doc);
    free(buf);
    return out;
}

/* ---- stories260K: completions and bad input ----------------------------- */

#define STORY_PROMPT "Once upon a time, there was a little girl"

/* -md: one draft model for the slots (here the model drafting for itself):
 * the greedy answer of cllm run, every draft token kept and counted. */
static void check_draft_model(const char *model) {
    server s;
    const char *args[] = {"-m", model, "-md", model, "--parallel", "2", "-c", "512", NULL};
    if (!server_start(&s, args)) {
        CHECKF(false, "the server with -md did not start");
        return;
    }
    char run_args[8192];
    snprintf(run_args, sizeof(run_args), "-m '%s' --temp 0 -n 24 -p '%s'", model, STORY_PROMPT);
    char *ref = run_text(run_args);
    for (int k = 0; k < 2; k++) {
        const char *req =
            "{\"prompt\": \"" STORY_PROMPT "\", \"max_tokens\": 24, \"temperature\": 0}";
        resp r = http(s.port, "POST", "/v1/completions", req);
        char *whole = whole_text(&r, NULL, 0);
        CHECKF(r.status == 200 && whole && ref && !strcmp(whole, ref),
               "-md: server '%s' vs run '%s'", whole ? whole : r.body, ref ? ref : "(none)");
        json *doc = json_parse(r.body);
        const json *t = json_get(doc, "timings");
        const double dn = t && json_get(t, "draft_n") ? json_num(json_get(t, "draft_n")) : -1;
        const double dk =
            t && json_get(t, "draft_n_accepted") ? json_num(json_get(t, "draft_n_accepted")) : -1;
        CHECKF(dn > 0 && dk == dn, "-md: %g drafted, %g kept: %s", dn, dk, r.body);
        json_free(doc);
        free(whole);
        resp_free(&r);
    }
    free(ref);
    CHECK_EQ_INT(server_stop(&s, SIGTERM), 0);
}

static void check_stories(const char *model) {
    server s;
    /* -c: the context of all slots, 256 each (as llama-server's -c) */
    const char *args[] = {"-m",  model,        "--parallel", "2",         "-c",
                          "512", "--max-body", "4096",       "--metrics", NULL};
    if (!server_start(&s, args)) {
        CHECKF(false, "the server did not start");
        return;
    }
    resp r = http(s.port, "GET", "/health", NULL);
    CHECK(r.status == 200);
    resp_free(&r);
    r = http(s.port, "GET", "/v1/models", NULL);
    CHECK(r.status == 200 && strstr(r.body, "\"id\":\"stories260K.gguf\""));
    resp_free(&r);

    /* greedy, whole: as cllm run */
    char run_args[8192];
    snprintf(run_args, sizeof(run_args), "-m '%s' --temp 0 -n 24 -p '%s'", model, STORY_PROMPT);
    char *ref = run_text(run_args);
    const char *req = "{\"model\": \"stories260K.gguf\", \"prompt\": \"" STORY_PROMPT
                      "\", \"max_tokens\": 24, \"temperature\": 0}";
    r = http(s.port, "POST", "/v1/completions", req);
    char finish[32];
    char *whole = whole_text(&r, finish, sizeof(finish));
    CHECKF(r.status == 200 && whole && ref && !strcmp(whole, ref), "server '%s' vs run '%s'",
           whole ? whole : "(none)", ref ? ref : "(none)");
    CHECK(!strcmp(finish, "length") && strstr(r.body, "\"object\":\"text_completion\""));
    CHECK(usage_field(&r, "completion_tokens") == 24 && usage_field(&r, "prompt_tokens") > 5);
    resp_free(&r);

    /* streamed: SSE framing, the same text, usage last */
    r = http(s.port, "POST", "/v1/completions",
             "{\"prompt\": \"" STORY_PROMPT "\", \"max_tokens\": 24, \"temperature\": 0, "
             "\"stream\": true, \"stream_options\": {\"include_usage\": true}}");
    sse ev;
    parse_sse(r.body, &ev);
    CHECK(r.status == 200 && strstr(r.head, "text/event-stream"));
    CHECKF(ev.framed && ev.n_events >= 4, "%s", r.body);
    CHECKF(whole && !strcmp(ev.text, whole), "streamed '%s' vs '%s'", ev.text, whole);
    CHECK(!strcmp(ev.finish, "length") && ev.has_usage && ev.cached >= 0);
    resp_free(&r);

    /* max_tokens 0: no token, finish_reason "length", whole and streamed */
    r = http(s.port, "POST", "/v1/completions",
             "{\"prompt\": \"" STORY_PROMPT "\", \"max_tokens\": 0, \"temperature\": 0}");
    char *none = whole_text(&r, finish, sizeof(finish));
    CHECKF(r.status == 200 && none && !none[0] && !strcmp(finish, "length") &&
               usage_field(&r, "completion_tokens") == 0,
           "max_tokens 0: %d '%s' (%s)", r.status, none ? none : "(none)", finish);
    free(none);
    resp_free(&r);
    r = http(s.port, "POST", "/v1/completions",
             "{\"prompt\": \"" STORY_PROMPT "\", \"max_tokens\": 0, \"stream\": true}");
    parse_sse(r.body, &ev);
    CHECKF(r.status == 200 && ev.framed && !ev.text[0] && !strcmp(ev.finish, "length"),
           "max_tokens 0, streamed: '%s' (%s)", ev.text, ev.finish);
    resp_free(&r);

    /* a short prompt again after a request that stopped at its first
     * token: the answer of cllm run, its first token with the same
     * log-probability bit for bit, not that of its last token decoded alone */
    snprintf(run_args, sizeof(run_args), "-m '%s' --temp 0 -n 16 -p 'Once upon'", model);
    char *short_ref = run_text(run_args);
    double lp[2] = {1, 2};
    char *short_text[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        r = http(s.port, "POST", "/v1/completions",
                 i == 0 ? "{\"prompt\": \"Once upon\", \"max_tokens\": 1, \"temperature\": 0, "
                          "\"logprobs\": 0}"
                        : "{\"prompt\": \"Once upon\", \"max_tokens\": 16, \"temperature\": 0, "
                          "\"logprobs\": 0}");
        json *doc = json_parse(r.body);
        const json *lps =
            json_get(json_get(json_at(json_get(doc, "choices"), 0), "logprobs"), "token_logprobs");
        if (json_len(lps) > 0) lp[i] = json_num(json_at(lps, 0));
        json_free(doc);
        short_text[i] = whole_text(&r, NULL, 0);
        resp_free(&r);
    }
    CHECKF(lp[0] == lp[1], "first token's log-probability %.17g, then %.17g", lp[0], lp[1]);
    CHECKF(short_text[1] && short_ref && !strcmp(short_text[1], short_ref),
           "after max_tokens 1: '%s' vs run '%s'", short_text[1] ? short_text[1] : "(none)",
           short_ref ? short_ref : "(none)");
    free(short_text[0]);
    free(short_text[1]);
    free(short_ref);

    /* sampling as cllm run samples: a seed repeats a text (and another seed
     * gives another), a repeat penalty changes it the same way */
    static const struct {
        const char *fields, *run_flags;
    } same[] = {
        {"\"temperature\": 0.9, \"top_k\": 40, \"top_p\": 0.95, \"min_p\": 0.05, \"seed\": 42",
         "--temp 0.9 --top-k 40 --top-p 0.95 --min-p 0.05 --seed 42"},
        {"\"temperature\": 0.9, \"top_k\": 40, \"top_p\": 0.95, \"min_p\": 0.05, \"seed\": 43",
         "--temp 0.9 --top-k 40 --top-p 0.95 --min-p 0.05 --seed 43"},
        {"\"temperature\": 0, \"repeat_penalty\": 1.5", "--temp 0 --repeat-penalty 1.5"},
    };
    char *texts[3] = {NULL, NULL, NULL};
    for (size_t i = 0; i < 3; i++) {
        char body[1024];
        snprintf(body, sizeof(body), "{\"prompt\": \"" STORY_PROMPT "\", \"max_tokens\": 24, %s}",
                 same[i].fields);
        snprintf(run_args, sizeof(run_args), "-m '%s' -n 24 %s -p '%s'", model, same[i].run_flags,
                 STORY_PROMPT);
        char *want = run_text(run_args);
        r = http(s.port, "POST", "/v1/completions", body);
        texts[i] = whole_text(&r, NULL, 0);
        resp_free(&r);
        r = http(s.port, "POST", "/v1/completions", body);
        char *again = whole_text(&r, NULL, 0);
        resp_free(&r);
        CHECKF(texts[i] && want && !strcmp(texts[i], want), "%s: server '%s' vs run '%s'",
               same[i].run_flags, texts[i] ? texts[i] : "(none)", want ? want : "(none)");
        CHECKF(again && texts[i] && !strcmp(again, texts[i]), "%s: '%s' then '%s'",
               same[i].run_flags, texts[i] ? texts[i] : "(none)", again ? again : "(none)");
        free(want);
        free(again);
    }
    CHECKF(texts[0] && texts[1] && strcmp(texts[0], texts[1]), "seeds 42 and 43 gave '%s'",
           texts[0] ? texts[0] : "(none)");
    CHECKF(texts[2] && whole && strcmp(texts[2], whole), "repeat_penalty 1.5 changed nothing: '%s'",
           whole ? whole : "(none)");
    for (size_t i = 0; i < 3; i++) free(texts[i]);

    /* a stop string inside the text, across tokens: cut before it, whole
     * and streamed (the held-back text released or dropped correctly) */
    if (whole && strlen(whole) > 30) {
        char stop[8], body[1024];
        memcpy(stop, whole + 20, 5);
        stop[5] = '\0';
        const size_t cut = (size_t)(strstr(whole, stop) - whole);
        for (int streamed = 0; streamed < 2; streamed++) {
            snprintf(body, sizeof(body),
                     "{\"prompt\": \"" STORY_PROMPT "\", \"max_tokens\": 24, \"temperature\": 0, "
                     "\"stop\": [\"zzzz\", \"%s\"], \"stream\": %s}",
                     stop, streamed ? "true" : "false");
            r = http(s.port, "POST", "/v1/completions", body);
            char *t = NULL;
            if (streamed) {
                parse_sse(r.body, &ev);
                t = strdup(ev.text);
                snprintf(finish, sizeof(finish), "%s", ev.finish);
            } else {
                t = whole_text(&r, finish, sizeof(finish));
            }
            CHECKF(t && strlen(t) == cut && !strncmp(t, whole, cut) && !strcmp(finish, "stop"),
                   "stop '%s': '%s' (%s)", stop, t ? t : "", finish);
            free(t);
            resp_free(&r);
        }
    }
    free(whole);
    free(ref);

    /* bad input: each an error object with its status; the server goes on */
    static const struct {
        const char *path, *body;
        int status;
        const char *code;
    } bad[] = {
        {"/v1/completions", "{\"prompt\": \"x\", ", 400, "invalid_json"},
        {"/v1/completions", "[1, 2]", 400, "invalid_type"},
        {"/v1/completions", "{\"prompt\": 42}", 400, "invalid_type"},
        {"/v1/completions", "{\"max_tokens\": 4}", 400, "missing_required_parameter"},
        {"/v1/completions", "{\"prompt\": \"x\", \"temperature\": \"hot\"}", 400, "invalid_type"},
        {"/v1/completions", "{\"prompt\": \"x\", \"temperature\": 5}", 400, "invalid_value"},
        {"/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": -1}", 400, "invalid_value"},
        {"/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 1.5}", 400, "invalid_type"},
        {"/v1/completions", "{\"prompt\": \"x\", \"stop\": 7}", 400, "invalid_type"},
        {"/v1/completions", "{\"prompt\": \"x\", \"stream\": \"yes\"}", 400, "invalid_type"},
        {"/v1/completions", "{\"prompt\": \"x\", \"n\": 2}", 400, "unsupported_value"},
        {"/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 1000}", 400,
         "context_length_exceeded"},
        {"/v1/completions", "{\"prompt\": \"x\xff\xfe\"}", 400, "invalid_utf8"},
        {"/v1/chat/completions", "{\"messages\": []}", 400, NULL},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}",
         400, "invalid_value"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", 400,
         NULL}, /* stories260K has no chat template */
        {"/v1/nothing", "{}", 404, "not_found"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        r = http(s.port, "POST", bad[i].path, bad[i].body);
        CHECKF(is_error(&r, bad[i].status, bad[i].code), "case %zu: %s", i, bad[i].body);
        resp_free(&r);
    }
    r = http(s.port, "GET", "/v1/completions", NULL);
    CHECK(is_error(&r, 405, NULL));
    resp_free(&r);
    /* a prompt longer than the context, with the numbers */
    char *longp = malloc(8192);
    strcpy(longp, "{\"prompt\": \"");
    for (int i = 0; i < 300; i++) strcat(longp, "cat ");
    strcat(longp, "\"}");
    r = http(s.port, "POST", "/v1/completions", longp);
    CHECK(is_error(&r, 400, "context_length_exceeded") && strstr(r.body, "256"));
    resp_free(&r);
    free(longp);
    /* a body over --max-body */
    char *big = malloc(10000);
    memset(big, ' ', 9999);
    big[9999] = '\0';
    big[0] = '{', big[9998] = '}';
    r = http(s.port, "POST", "/v1/completions", big);
    CHECK(is_error(&r, 413, "request_too_large"));
    resp_free(&r);
    free(big);
    r = http(s.port, "GET", "/health", NULL);
    CHECK(r.status == 200);
    resp_free(&r);
    CHECK(metric(s.port, "cllm_requests_rejected_total ") >= 15);
    CHECK(metric(s.port, "cllm_memory_bytes{kind=\"state\",what=\"allocated\"} ") > 0);
    /* resident: nothing streamed */
    CHECK(metric(s.port, "cllm_stream_layers ") == 0 &&
          metric(s.port, "cllm_stream_passes_total ") == 0 &&
          metric(s.port, "cllm_stream_read_bytes_total ") == 0);
    CHECK_EQ_INT(server_stop(&s, SIGINT), 0);
}

/* Streamed layers (--mem below the model's size): /metrics counts their
 * reads, one read of each per pass, and the answer is the resident one. */
static void check_stream_metrics(const char *model) {
    server s;
    const char *args[] = {"-m",  model,   "--parallel",  "2",         "-c",
                          "256", "--mem", "cpu=1400KiB", "--metrics", NULL};
    if (!server_start(&s, args)) {
        CHECKF(false, "the server did not start");
        return;
    }
    char run_args[8192];
    snprintf(run_args, sizeof(run_args), "-m '%s' --temp 0 -n 24 -p '%s'", model, STORY_PROMPT);
    char *ref = run_text(run_args);
    const char *req = "{\"prompt\": \"" STORY_PROMPT "\", \"max_tokens\": 24, \"temperature\": 0}";
    resp r = http(s.port, "POST", "/v1/completions", req);
    char finish[32];
    char *whole = whole_text(&r, finish, sizeof(finish));
    CHECKF(r.status == 200 && whole && ref && !strcmp(whole, ref), "streamed '%s' vs run '%s'",
           whole ? whole : "(none)", ref ? ref : "(none)");
    free(whole);
    free(ref);
    resp_free(&r);
    const double layers = metric(s.port, "cllm_stream_layers ");
    const double pass = metric(s.port, "cllm_stream_pass_bytes ");
    const double passes = metric(s.port, "cllm_stream_passes_total ");
    const double bytes = metric(s.port, "cllm_stream_read_bytes_total ");
    const double gen = metric(s.port, "cllm_completion_tokens_total ");
    /* a pass for the prompt and at most one per token after the first */
    CHECKF(layers >= 1 && pass > 0 && gen == 24 && passes >= 1 && passes <= gen &&
               bytes >= passes * pass && metric(s.port, "cllm_stream_wait_seconds_total ") >= 0,
           "streamed: %g layers, %g bytes a pass, %g passes, %g bytes read, %g tokens", layers,
           pass, passes, bytes, gen);
    CHECK_EQ_INT(server_stop(&s, SIGINT), 0);
}

/* ---- SmolLM2: chat, the cache, the key, cancellation, load -------------- */

static char *chat_body(const char *question, const char *answer, const char *question2,
                       int max_tokens, bool stream) {
    char *b = malloc(8192);
    if (answer) {
        snprintf(b, 8192,
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"%s\"}, {\"role\": "
                 "\"assistant\", \"content\": \"%s\"}, {\"role\": \"user\", \"content\": \"%s\"}],"
                 " \"temperature\": 0, \"max_tokens\": %d, \"stream\": %s}",
                 question, answer, question2, max_tokens, stream ? "true" : "false");
    } else {
        snprintf(b, 8192,
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"%s\"}], \"temperature\": 0,"
                 " \"max_tokens\": %d, \"stream\": %s, \"stream_options\": {\"include_usage\": "
                 "true}}",
                 question, max_tokens, stream ? "true" : "false");
    }
    return b;
}

/* The JSON string of s (no quotes, ASCII and escapes only as needed). */
static void json_escape(const char *s, char *out, size_t size) {
    size_t o = 0;
    for (; *s && o + 7 < size; s++) {
        if (*s == '"' || *s == '\\')
            out[o++] = '\\', out[o++] = *s;
        else if ((unsigned char)*s < 0x20)
            o += (size_t)snprintf(out + o, size - o, "\\u%04x", *s);
        else
            out[o++] = *s;
    }
    out[o] = '\0';
}

#define N_LOAD_PROMPTS 3
static const char *const k_load_prompts[N_LOAD_PROMPTS] = {
    "Name a fruit.", "What is the capital of France?", "Say hello."};
static char *g_load_ref[N_LOAD_PROMPTS];

typedef struct load_arg {
    int port, index, errors, mismatches, done;
} load_arg;

/* Load: clients, requests per client per round, rounds (8 clients x 27
 * requests each, over the server's 2 slots and its queue). */
enum { LOAD_CLIENTS = 8, LOAD_REQUESTS = 9, LOAD_ROUNDS = 3 };

static void *load_client(void *p) {
    load_arg *a = p;
    for (int k = 0; k < LOAD_REQUESTS; k++) {
        const int pi = (a->index + k) % N_LOAD_PROMPTS;
        char *body = chat_body(k_load_prompts[pi], NULL, NULL, 12, true);
        const int fd =
            send_request(a->port, "POST", "/v1/chat/completions", NULL, body, strlen(body));
        free(body);
        if (fd < 0) {
            a->errors++;
            continue;
        }
        if ((k == 2 || k == 6) && a->index < LOAD_CLIENTS / 2) { /* leaves after the first event */
            char buf[512];
            (void)recv(fd, buf, sizeof(buf), 0);
            close(fd);
            continue;
        }
        resp r;
        if (!read_response(fd, &r) || r.status != 200) {
            a->errors++;
        } else {
            sse ev;
            parse_sse(r.body, &ev);
            if (!ev.framed || ev.error) {
                a->errors++;
            } else if (strcmp(ev.text, g_load_ref[pi]) != 0) {
                fprintf(stderr, "load: '%s' answered '%s', alone '%s'\n", k_load_prompts[pi],
                        ev.text, g_load_ref[pi]);
                a->mismatches++;
            } else
                a->done++;
        }
        resp_free(&r);
    }
    return NULL;
}

/* Chat logprobs and OpenAI's penalties, from the server's own numbers: with
 * "logprobs" each generated token has an entry {token, logprob, bytes,
 * top_logprobs} of the raw distribution. Greedy without penalties takes the
 * top entry; with frequency_penalty f and presence_penalty p, greedy takes the
 * token that maximizes logprob - f * count - p * (count > 0) over the tokens
 * generated before it. That is checked over the 20 top entries wherever it
 * can be decided (the winner's penalized score is at least the 20th raw
 * logprob, so no token outside the list can beat it). Returns the number of
 * steps where the penalty changed the choice. */
static int check_chat_logprobs(int port, const char *extra, bool penalized, float f, float pp) {
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"messages\": [{\"role\": \"user\", \"content\": \"Write a story about a "
             "cat and a dog.\"}], \"temperature\": 0, \"max_tokens\": 40, \"logprobs\": true, "
             "\"top_logprobs\": 20%s}",
             extra);
    resp r = http(port, "POST", "/v1/chat/completions", body);
    json *doc = json_parse(r.body);
    const json *ch = json_at(json_get(doc, "choices"), 0);
    const json *content = json_get(json_get(ch, "logprobs"), "content");
    const char *answer = json_str(json_get(json_get(ch, "message"), "content"));
    const size_t n = json_len(content);
    CHECKF(r.status == 200 && answer && n > 0 &&
               (long)n == (long)json_num(json_get(json_get(doc, "usage"), "completion_tokens")),
           "%zu entries: %s", n, r.body);
    char text[8192] = "";
    const char *seen[64];
    int changed = 0, decided = 0;
    for (size_t i = 0; i < n && i < 64; i++) {
        const json *e = json_at(content, i);
        const char *tok = json_str(json_get(e, "token"));
        const double lp = json_num(json_get(e, "logprob"));
        const json *top = json_get(e, "top_logprobs");
        const size_t nt = json_len(top);
        CHECKF(tok && lp <= 0 && nt == 20 && json_len(json_get(e, "bytes")) >= strlen(tok),
               "entry %zu", i);
        if (!tok || nt != 20) break;
        strncat(text, tok, sizeof(text) - strlen(text) - 1);
        seen[i] = tok;
        double mass = 0, best = -INFINITY, prev = 0;
        const char *best_tok = NULL;
        for (size_t k = 0; k < nt; k++) {
            const json *t = json_at(top, k);
            const char *tt = json_str(json_get(t, "token"));
            const double tl = json_num(json_get(t, "logprob"));
            CHECKF(tt && tl <= 0 && (k == 0 || tl <= prev), "entry %zu top %zu", i, k);
            prev = tl, mass += exp(tl);
            int count = 0;
            for (size_t j = 0; j < i; j++) count += tt && !strcmp(seen[j], tt);
            const double score = penalized ? tl - f * count - (count > 0 ? pp : 0) : tl;
            if (score > best) best = score, best_tok = tt;
        }
        CHECKF(mass <= 1.0001, "entry %zu: top mass %g", i, mass);
        const char *first = json_str(json_get(json_at(top, 0), "token"));
        if (!penalized) {
            CHECKF(first && !strcmp(first, tok) &&
                       fabs(json_num(json_get(json_at(top, 0), "logprob")) - lp) < 1e-6,
                   "greedy entry %zu: '%s' but top '%s'", i, tok, first ? first : "");
            continue;
        }
        if (best < prev) continue; /* a token outside the list could win */
        decided++;
        CHECKF(best_tok && !strcmp(best_tok, tok), "penalized entry %zu: '%s' but '%s' scores best",
               i, tok, best_tok ? best_tok : "");
        changed += first && strcmp(first, tok) != 0;
    }
    CHECKF(answer && !strcmp(text, answer), "tokens '%s' vs answer '%s'", text,
           answer ? answer : "");
    if (penalized) CHECKF(decided * 4 >= (int)n * 3, "decided %d of %zu steps", decided, n);
    json_free(doc);
    resp_free(&r);
    return changed;
}

static void check_smollm2(const char *model) {
    server s;
    const char *args[] = {"-m",  model,       "--parallel", "2",         "--ctx-per-slot",
                          "512", "--api-key", "sekrit",     "--metrics", NULL};
    if (!server_start(&s, args)) {
        CHECKF(false, "the server did not start");
        return;
    }
    /* the key: /health needs none; others need the right one */
    g_key_header = "";
    resp r = http(s.port, "GET", "/v1/models", NULL);
    CHECK(is_error(&r, 401, "invalid_api_key"));
    resp_free(&r);
    g_key_header = "Authorization: Bearer sekriT\r\n";
    r = http(s.port, "GET", "/v1/models", NULL);
    CHECK(is_error(&r, 401, "invalid_api_key"));
    resp_free(&r);
    g_key_header = "Authorization: Bearer sekrit\r\n";
    r = http(s.port, "GET", "/v1/models", NULL);
    CHECK(r.status == 200);
    resp_free(&r);

    /* greedy chat: as cllm run --chat */
    char run_args[8192];
    snprintf(run_args, sizeof(run_args), "-m '%s' --temp 0 --chat -n 24 -p 'Name a fruit.'", model);
    char *ref = run_text(run_args);
    char *body = chat_body("Name a fruit.", NULL, NULL, 24, false);
    r = http(s.port, "POST", "/v1/chat/completions", body);
    free(body);
    char *answer = whole_text(&r, NULL, 0);
    CHECKF(r.status == 200 && answer && ref && !strcmp(answer, ref), "server '%s' vs run '%s'",
           answer ? answer : r.body, ref ? ref : "(none)");
    CHECK(strstr(r.body, "\"object\":\"chat.completion\"") != NULL);
    const long p1 = usage_field(&r, "prompt_tokens");
    { /* llama-server's timings, with speculative decoding's drafts */
        json *doc = json_parse(r.body);
        const json *t = json_get(doc, "timings");
        CHECKF(t && json_get(t, "predicted_ms") && json_get(t, "draft_n") &&
                   json_num(json_get(t, "draft_n")) >= json_num(json_get(t, "draft_n_accepted")),
               "timings: %s", r.body);
        json_free(doc);
    }
    resp_free(&r);
    free(ref);

    /* the second turn reuses the first from the cache */
    if (answer) {
        char esc[4096];
        json_escape(answer, esc, sizeof(esc));
        body = chat_body("Name a fruit.", esc, "What color is it?", 16, false);
        r = http(s.port, "POST", "/v1/chat/completions", body);
        free(body);
        const long cached = usage_field(&r, "cached_tokens"), p2 = usage_field(&r, "prompt_tokens");
        CHECKF(r.status == 200 && cached >= p1 && cached < p2, "cached %ld of %ld (turn 1: %ld)",
               cached, p2, p1);
        resp_free(&r);
    }
    free(answer);

    /* a question that shares the first one's beginning reuses the rows of
     * that prompt (at least 8 tokens left to read), and answers as a fresh
     * read */
    snprintf(run_args, sizeof(run_args),
             "-m '%s' --temp 0 --chat -n 24 -p 'Name a fruit and a color.'", model);
    ref = run_text(run_args);
    body = chat_body("Name a fruit and a color.", NULL, NULL, 24, false);
    r = http(s.port, "POST", "/v1/chat/completions", body);
    free(body);
    answer = whole_text(&r, NULL, 0);
    const long cut = usage_field(&r, "cached_tokens");
    CHECKF(r.status == 200 && cut > 0 && cut < p1, "cached %ld (turn 1: %ld)", cut, p1);
    CHECKF(answer && ref && !strcmp(answer, ref), "reused: server '%s' vs run '%s'",
           answer ? answer : r.body, ref ? ref : "(none)");
    resp_free(&r);
    free(answer);
    free(ref);

    /* ignore_eos: the end token is never sampled, so an answer that ended
     * early goes on from where it ended to max_tokens */
    body = chat_body("Name a fruit.", NULL, NULL, 48, false);
    r = http(s.port, "POST", "/v1/chat/completions", body);
    char fin[32] = "";
    char *ended = whole_text(&r, fin, sizeof(fin));
    const long n_ended = usage_field(&r, "completion_tokens");
    CHECKF(ended && !strcmp(fin, "stop") && n_ended > 0 && n_ended < 48,
           "without ignore_eos: '%s' after %ld tokens", fin, n_ended);
    resp_free(&r);
    char body2[8192];
    snprintf(body2, sizeof(body2), "{\"ignore_eos\": true, %s", body + 1);
    free(body);
    r = http(s.port, "POST", "/v1/chat/completions", body2);
    answer = whole_text(&r, fin, sizeof(fin));
    CHECKF(answer && ended && !strcmp(fin, "length") &&
               usage_field(&r, "completion_tokens") == 48 &&
               strncmp(answer, ended, strlen(ended)) == 0 && strlen(answer) > strlen(ended),
           "ignore_eos: '%s' (%s) after '%s'", answer ? answer : r.body, fin,
           ended ? ended : "(none)");
    resp_free(&r);
    free(answer);
    free(ended);
    snprintf(body2, sizeof(body2), "{\"prompt\": \"x\", \"ignore_eos\": 1}");
    r = http(s.port, "POST", "/v1/completions", body2);
    CHECKF(is_error(&r, 400, "invalid_type"), "%s", r.body);
    resp_free(&r);

    /* logprobs, then frequency and presence penalties checked with them */
    (void)check_chat_logprobs(s.port, "", false, 0, 0);
    const int changed = check_chat_logprobs(
        s.port, ", \"frequency_penalty\": 1.5, \"presence_penalty\": 0.5", true, 1.5f, 0.5f);
    CHECKF(changed > 0, "the penalties changed no choice");

    /* every load prompt through cllm run --temp 0 --chat: the reference
     * answers */
    for (int i = 0; i < N_LOAD_PROMPTS; i++) {
        snprintf(run_args, sizeof(run_args), "-m '%s' --temp 0 --chat -n 12 -p '%s'", model,
                 k_load_prompts[i]);
        g_load_ref[i] = run_text(run_args);
        CHECKF(g_load_ref[i] && g_load_ref[i][0], "cllm run %s gave no text", run_args);
        if (!g_load_ref[i]) g_load_ref[i] = strdup("");
    }

    /* a client that leaves mid-stream: its generation stops, its slot frees */
    const double cancelled0 = metric(s.port, "cllm_requests_cancelled_total ");
    body = chat_body("Tell me a long story about a dragon.", NULL, NULL, 400, true);
    int fd = send_request(s.port, "POST", "/v1/chat/completions", NULL, body, strlen(body));
    free(body);
    char buf[256];
    CHECK(fd >= 0 && recv(fd, buf, sizeof(buf), 0) > 0);
    close(fd);
    bool freed = false;
    for (double t0 = now_s(); now_s() - t0 < 10 && !freed; usleep(50 * 1000)) {
        freed = metric(s.port, "cllm_requests_cancelled_total ") >= cancelled0 + 1 &&
                metric(s.port, "cllm_slots_busy ") == 0;
    }
    CHECKF(freed, "the slot of a client that left is still busy");

    /* load: 8 streaming clients x 9 requests, half of them leaving two
     * early; three rounds, the server's resident memory flat after the
     * first */
    long rss[LOAD_ROUNDS] = {0};
    for (int round = 0; round < LOAD_ROUNDS; round++) {
        load_arg la[LOAD_CLIENTS];
        pthread_t th[LOAD_CLIENTS];
        for (int i = 0; i < LOAD_CLIENTS; i++) {
            la[i] = (load_arg){.port = s.port, .index = i};
            pthread_create(&th[i], NULL, load_client, &la[i]);
        }
        int errors = 0, mismatches = 0, done = 0;
        for (int i = 0; i < LOAD_CLIENTS; i++) {
            pthread_join(th[i], NULL);
            errors += la[i].errors, mismatches += la[i].mismatches, done += la[i].done;
        }
        const int want = LOAD_CLIENTS * LOAD_REQUESTS - LOAD_CLIENTS / 2 * 2;
        CHECKF(errors == 0 && mismatches == 0 && done == want,
               "load round %d: %d errors, %d mismatches, %d done of %d", round, errors, mismatches,
               done, want);
        /* the slots are freed once the clients that left are noticed */
        for (double t1 = now_s(); now_s() - t1 < 10 && metric(s.port, "cllm_slots_busy ") != 0;
             usleep(50 * 1000)) {
        }
        rss[round] = rss_kib(s.pid);
    }
    fprintf(stderr, "load: server resident memory after each round: %ld, %ld, %ld KiB\n", rss[0],
            rss[1], rss[2]);
#if !defined(__SANITIZE_ADDRESS__) /* ASan keeps freed memory in quarantine */
    CHECKF(rss[0] > 0 && rss[2] <= rss[0] + 4096,
           "resident memory grew over load rounds: %ld, %ld, %ld KiB", rss[0], rss[1], rss[2]);
#endif
    for (int i = 0; i < N_LOAD_PROMPTS; i++) free(g_load_ref[i]);
    r = http(s.port, "GET", "/health", NULL);
    CHECK(r.status == 200);
    resp_free(&r);

    /* SIGTERM with a request in flight: it ends, the server exits 0 */
    body = chat_body("Tell me a long story about a dragon.", NULL, NULL, 400, true);
    fd = send_request(s.port, "POST", "/v1/chat/completions", NULL, body, strlen(body));
    free(body);
    CHECK(fd >= 0 && recv(fd, buf, sizeof(buf), 0) > 0);
    const double t0 = now_s();
    CHECK_EQ_INT(server_stop(&s, SIGTERM), 0);
    CHECKF(now_s() - t0 < 10, "stopping took %.1f s", now_s() - t0);
    close(fd);
    g_key_header = "";
}

/* A full queue (503 with Retry-After) and --timeout (504; an error event). */
/* A full queue (503) and --timeout (504, and an error event mid-stream).
 * Returns false, checking nothing, when the machine was too busy to keep the
 * scenario's timing (request C must arrive while B still waits, within B's
 * timeout): the caller runs it again. */
static bool check_queue_timeout(const char *model) {
    server s;
    const char *args[] = {"-m",          model, "--parallel", "1", "-c",        "4096",
                          "--max-queue", "1",   "--timeout",  "2", "--metrics", NULL};
    if (!server_start(&s, args)) {
        CHECKF(false, "the server did not start");
        return true;
    }
    /* A must outlast the timeout, and B, which gets the slot when A times
     * out a moment before B's own deadline, must still be running at that
     * deadline: long answers without an end token for both (a 400-token A
     * took 1.6 s on a Zen 5, an 8-token B sometimes ended in time) */
    char *chat = chat_body("Tell me a long story about a dragon.", NULL, NULL, 4000, true);
    char body[8192];
    snprintf(body, sizeof(body), "{\"ignore_eos\": true, %s", chat + 1);
    free(chat);
    const int a = send_request(s.port, "POST", "/v1/chat/completions", NULL, body, strlen(body));
    /* A holds the only slot (not the queue) before B comes */
    bool running = false;
    for (double t0 = now_s(); now_s() - t0 < 5 && !running; usleep(20 * 1000)) {
        running = metric(s.port, "cllm_slots_busy ") == 1;
    }
    CHECK(a >= 0 && running);
    chat = chat_body("Tell me a long story about a dragon.", NULL, NULL, 400, false);
    snprintf(body, sizeof(body), "{\"ignore_eos\": true, %s", chat + 1);
    free(chat);
    const double t_b = now_s();
    const int b = send_request(s.port, "POST", "/v1/chat/completions", NULL, body, strlen(body));
    bool queued = false;
    for (double t0 = now_s(); now_s() - t0 < 5 && !queued; usleep(20 * 1000)) {
        queued = metric(s.port, "cllm_queue_length ") == 1;
    }
    resp r = http(s.port, "POST", "/v1/chat/completions", body);
    const bool in_time = now_s() - t_b < 1.5;
    if (in_time) {
        CHECK(queued);
        CHECK(is_error(&r, 503, "queue_full") && strstr(r.head, "Retry-After:"));
    }
    resp_free(&r);
    /* both time out: B with 504 (queued, then running from A's timeout on),
     * the streamed A with an error event */
    const bool got_b = read_response(b, &r);
    CHECKF(got_b && is_error(&r, 504, "timeout"), "B: %d %s", got_b ? r.status : -1,
           got_b && r.body ? r.body : "");
    resp_free(&r);
    CHECK(read_response(a, &r) && r.status == 200);
    sse ev;
    parse_sse(r.body, &ev);
    CHECKF(ev.framed && ev.error, "%s", r.body);
    resp_free(&r);
    CHECK_EQ_INT(server_stop(&s, SIGTERM), 0);
    if (!in_time) printf("test_serve: the queue check came too late (busy machine): again\n");
    return in_time;
}

/* ---- IPv6 ----------------------------------------------------------------- */

/* Whether this machine can listen on ::1 (containers often have no IPv6). */
/* A request with extra headers. */
static resp http_with(int port, const char *method, const char *path, const char *headers,
                      const char *body) {
    resp r = {0};
    const int fd = send_request(port, method, path, headers, body, body ? strlen(body) : 0);
    if (fd < 0 || !read_response(fd, &r)) r.status = -1;
    if (!r.body) r.body = calloc(1, 1);
    return r;
}

/* The value of header `name` in r (case-insensitive name), or "". */
static void header_of(const resp *r, const char *name, char *out, size_t size) {
    out[0] = '\0';
    const size_t n = strlen(name);
    for (const char *l = r->head; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncasecmp(l, name, n) == 0 && l[n] == ':') {
            const char *v = l + n + 1;
            while (*v == ' ') v++;
            size_t k = strcspn(v, "\r\n");
            if (k >= size) k = size - 1;
            memcpy(out, v, k);
            out[k] = '\0';
            return;
        }
    }
}

static char *response_id(const resp *r) {
    json *doc = json_parse(r->body);
    const char *id = json_str(json_get(doc, "id"));
    char *out = id ? strdup(id) : NULL;
    json_free(doc);
    return out;
}

/* Model names (any served by default; --alias, --strict-model-names), the
 * routes without /v1, x-api-key, CORS (--cors-origin) and response ids. */
static void check_names_cors(const char *model) {
    server s;
    const char *args1[] = {"-m", model, "-c", "128", NULL};
    if (!server_start(&s, args1)) {
        CHECKF(false, "the server did not start");
        return;
    }
    const char *body = "{\"prompt\": \"Once\", \"max_tokens\": 2, \"temperature\": 0, "
                       "\"model\": \"gpt-4o-mini\"}";
    resp r = http(s.port, "POST", "/v1/completions", body);
    CHECKF(r.status == 200, "any model name is served by default: %d %s", r.status, r.body);
    char *id1 = response_id(&r);
    resp_free(&r);
    r = http(s.port, "POST", "/completions", body); /* without /v1 */
    char *id2 = response_id(&r);
    CHECKF(r.status == 200 && id1 && id2 && strcmp(id1, id2) != 0 && strlen(id1) > 20 &&
               !strncmp(id1, "cmpl-", 5),
           "ids %s %s", id1 ? id1 : "-", id2 ? id2 : "-");
    free(id1);
    free(id2);
    resp_free(&r);
    /* no --cors-origin: no CORS headers, no preflight */
    char v[256];
    r = http_with(s.port, "GET", "/v1/models", "Origin: http://app.example\r\n", NULL);
    header_of(&r, "Access-Control-Allow-Origin", v, sizeof(v));
    CHECKF(r.status == 200 && !v[0], "no CORS without --cors-origin: %s", v);
    resp_free(&r);
    r = http_with(s.port, "OPTIONS", "/v1/chat/completions", "Origin: http://app.example\r\n",
                  NULL);
    CHECK(is_error(&r, 405, "method_not_allowed"));
    resp_free(&r);
    CHECK_EQ_INT(server_stop(&s, SIGTERM), 0);

    const char *args2[] = {"-m",
                           model,
                           "-c",
                           "128",
                           "--alias",
                           "my-model",
                           "--alias",
                           "other",
                           "--strict-model-names",
                           "--cors-origin",
                           "http://app.example",
                           "--api-key",
                           "sesame",
                           NULL};
    g_key_header = "Authorization: Bearer sesame\r\n";
    if (!server_start(&s, args2)) {
        g_key_header = "";
        CHECKF(false, "the server did not start");
        return;
    }
    r = http(s.port, "GET", "/v1/models", NULL);
    CHECKF(r.status == 200 && strstr(r.body, "\"id\":\"stories260K.gguf\"") &&
               strstr(r.body, "\"id\":\"my-model\"") && strstr(r.body, "\"id\":\"other\""),
           "%s", r.body);
    resp_free(&r);
    r = http(s.port, "GET", "/models/my-model", NULL);
    CHECKF(r.status == 200 && strstr(r.body, "\"id\":\"my-model\""), "%s", r.body);
    resp_free(&r);
    r = http(s.port, "GET", "/v1/models/gpt-4o-mini", NULL);
    CHECK(is_error(&r, 404, "model_not_found"));
    resp_free(&r);
    r = http(s.port, "POST", "/v1/completions", body);
    CHECK(is_error(&r, 404, "model_not_found"));
    resp_free(&r);
    r = http(s.port, "POST", "/v1/completions",
             "{\"prompt\": \"Once\", \"max_tokens\": 2, \"model\": \"my-model\"}");
    CHECKF(r.status == 200, "%d %s", r.status, r.body);
    resp_free(&r);
    /* the key as x-api-key; a wrong one refused either way */
    g_key_header = "";
    r = http_with(s.port, "GET", "/v1/models", "x-api-key: sesame\r\n", NULL);
    CHECK(r.status == 200);
    resp_free(&r);
    r = http_with(s.port, "GET", "/v1/models", "x-api-key: open\r\n", NULL);
    CHECK(is_error(&r, 401, "invalid_api_key"));
    resp_free(&r);
    /* a preflight from the allowed origin, without the key (browsers send
     * none), and the header on answers, streamed ones too */
    r = http_with(s.port, "OPTIONS", "/v1/chat/completions",
                  "Origin: http://app.example\r\nAccess-Control-Request-Method: POST\r\n"
                  "Access-Control-Request-Headers: authorization, content-type\r\n",
                  NULL);
    header_of(&r, "Access-Control-Allow-Origin", v, sizeof(v));
    CHECKF(r.status == 204 && !strcmp(v, "http://app.example"), "preflight: %d '%s'", r.status, v);
    header_of(&r, "Access-Control-Allow-Methods", v, sizeof(v));
    CHECKF(strstr(v, "POST") != NULL, "methods '%s'", v);
    header_of(&r, "Access-Control-Allow-Headers", v, sizeof(v));
    CHECKF(strstr(v, "authorization") != NULL, "headers '%s'", v);
    resp_free(&r);
    r = http_with(s.port, "OPTIONS", "/v1/chat/completions", "Origin: http://evil.example\r\n",
                  NULL);
    header_of(&r, "Access-Control-Allow-Origin", v, sizeof(v));
    CHECKF(r.status != 204 && !v[0], "a preflight from another origin: %d '%s'", r.status, v);
    resp_free(&r);
    r = http_with(s.port, "POST", "/v1/completions",
                  "Origin: http://app.example\r\nx-api-key: sesame\r\n",
                  "{\"prompt\": \"Once\", \"max_tokens\": 2, \"stream\": true}");
    header_of(&r, "Access-Control-Allow-Origin", v, sizeof(v));
    CHECKF(r.status == 200 && !strcmp(v, "http://app.example"), "streamed: %d '%s'", r.status, v);
    resp_free(&r);
    r = http_with(s.port, "GET", "/v1/models", "Origin: http://app.example\r\n", NULL);
    header_of(&r, "Access-Control-Allow-Origin", v, sizeof(v));
    CHECKF(r.status == 401 && !strcmp(v, "http://app.example"), "an error: %d '%s'", r.status, v);
    resp_free(&r);
    CHECK_EQ_INT(server_stop(&s, SIGTERM), 0);
}

static bool have_ipv6_loopback(void) {
    const int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0) return false;
    struct sockaddr_in6 a = {.sin6_family = AF_INET6};
    a.sin6_addr = in6addr_loopback;
    const bool ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

static void check_hosts(const char *model) {
    /* a name is not an address: a clear error before anything is loaded */
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "'%s' serve -m '%s' --host localhost --port 0 2>&1", g_cllm, model);
    FILE *p = popen(cmd, "r");
    char out[1024] = "";
    const size_t n = p ? fread(out, 1, sizeof(out) - 1, p) : 0;
    out[n] = '\0';
    const int st = p ? pclose(p) : -1;
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) != 0 && strstr(out, "not an IPv4 or IPv6 address"),
           "--host localhost: %s", out);
    /* on ::1 where the machine has IPv6; /metrics off without --metrics */
    g_ipv6 = have_ipv6_loopback();
    if (!g_ipv6) printf("test_serve: no IPv6 loopback here: --host ::1 not checked\n");
    server s;
    const char *args[] = {"-m", model, "--host", g_ipv6 ? "::1" : "127.0.0.1", "-c", "128", NULL};
    const bool up = server_start(&s, args);
    CHECKF(up, "the server did not start on %s", args[3]);
    if (up) {
        resp r = http(s.port, "POST", "/v1/completions",
                      "{\"prompt\": \"Once\", \"max_tokens\": 4, \"temperature\": 0}");
        CHECK(r.status == 200 && usage_field(&r, "completion_tokens") == 4);
        resp_free(&r);
        r = http(s.port, "GET", "/metrics", NULL);
        CHECK(is_error(&r, 404, "not_found") && strstr(r.body, "--metrics"));
        resp_free(&r);
        CHECK_EQ_INT(server_stop(&s, SIGTERM), 0);
    }
    g_ipv6 = false;
}

/* ---- structured output: grammar, json_schema, response_format ---------- */

/* s without blanks, tabs and line ends (a new string). */
static char *squeeze(const char *s) {
    char *o = strdup(s ? s : ""), *w = o;
    for (const char *p = o; *p; p++) {
        if (*p != ' ' && *p != '\n' && *p != '\t' && *p != '\r') *w++ = *p;
    }
    *w = '\0';
    return o;
}

/* The text of a completion request's answer and its finish reason. */
static char *complete(int port, const char *path, const char *body, int *status, char *finish) {
    resp r = http(port, "POST", path, body);
    *status = r.status;
    char *t = r.status == 200 ? whole_text(&r, finish, 32) : NULL;
    if (r.status != 200) fprintf(stderr, "  %s: %d %s\n", body, r.status, r.body);
    resp_free(&r);
    return t;
}

#define COLOR_SCHEMA                                                                               \
    "{\"type\": \"object\", \"properties\": {\"c\": {\"enum\": [\"red\", \"blue\"]}}, "            \
    "\"required\": [\"c\"], \"additionalProperties\": false}"

static bool is_color_json(const char *text) {
    char *q = squeeze(text);
    const bool ok = !strcmp(q, "{\"c\":\"red\"}") || !strcmp(q, "{\"c\":\"blue\"}");
    free(q);
    return ok;
}

static void check_structured(const char *model) {
    server s;
    const char *args[] = {"-m", model, "-c", "256", NULL};
    if (!server_start(&s, args)) {
        CHECKF(false, "the server did not start");
        return;
    }
    int st;
    char fin[32] = "";
    /* GBNF (llama-server's "grammar"): sampled, yet only what it allows */
    for (int seed = 1; seed <= 3; seed++) {
        char body[512];
        snprintf(body, sizeof(body),
                 "{\"prompt\": \"Once\", \"max_tokens\": 16, \"seed\": %d, \"temperature\": 1, "
                 "\"grammar\": \"root ::= \\\"yes\\\" | \\\"no\\\" | \\\"maybe so\\\"\"}",
                 seed);
        char *t = complete(s.port, "/v1/completions", body, &st, fin);
        CHECKF(st == 200 && t &&
                   (!strcmp(t, "yes") || !strcmp(t, "no") || !strcmp(t, "maybe so")) &&
                   !strcmp(fin, "stop"),
               "grammar: '%s' (%s)", t ? t : "-", fin);
        free(t);
    }
    /* a schema: llama-server's "json_schema", OpenAI's response_format */
    const char *bodies[] = {
        "{\"prompt\": \"Once\", \"max_tokens\": 60, \"seed\": 5, \"json_schema\": " COLOR_SCHEMA
        "}",
        "{\"prompt\": \"Once\", \"max_tokens\": 60, \"seed\": 6, \"response_format\": {\"type\": "
        "\"json_schema\", \"json_schema\": {\"name\": \"color\", \"strict\": true, "
        "\"schema\": " COLOR_SCHEMA "}}}",
        "{\"prompt\": \"Once\", \"max_tokens\": 60, \"seed\": 7, \"stream\": true, "
        "\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"c\", "
        "\"schema\": " COLOR_SCHEMA "}}}",
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        if (strstr(bodies[i], "\"stream\": true")) {
            resp r = http(s.port, "POST", "/v1/completions", bodies[i]);
            sse ev;
            parse_sse(r.body, &ev);
            CHECKF(r.status == 200 && ev.framed && is_color_json(ev.text) &&
                       !strcmp(ev.finish, "stop"),
                   "schema, streamed: '%s' (%s)", ev.text, ev.finish);
            resp_free(&r);
            continue;
        }
        char *t = complete(s.port, "/v1/completions", bodies[i], &st, fin);
        CHECKF(st == 200 && is_color_json(t) && !strcmp(fin, "stop"), "schema %zu: '%s' (%s)", i,
               t ? t : "-", fin);
        free(t);
    }
    /* json_object: any JSON object; text: no grammar, the same as without */
    char *t = complete(s.port, "/v1/completions",
                       "{\"prompt\": \"Once\", \"max_tokens\": 12, \"temperature\": 0, "
                       "\"response_format\": {\"type\": \"json_object\"}}",
                       &st, fin);
    char *q = squeeze(t);
    CHECKF(st == 200 && q[0] == '{', "json_object: '%s'", t ? t : "-");
    free(q);
    free(t);
    char *plain =
        complete(s.port, "/v1/completions",
                 "{\"prompt\": \"Once\", \"max_tokens\": 12, \"temperature\": 0}", &st, fin);
    t = complete(s.port, "/v1/completions",
                 "{\"prompt\": \"Once\", \"max_tokens\": 12, \"temperature\": 0, "
                 "\"response_format\": {\"type\": \"text\"}}",
                 &st, fin);
    CHECKF(plain && t && !strcmp(plain, t), "text: '%s' vs '%s'", t ? t : "-", plain ? plain : "-");
    char *plain_ref = plain;
    free(t);
    /* bad ones: 400 naming the field, with the library's message */
    static const struct {
        const char *body, *code, *param, *says;
    } bad[] = {
        {"{\"prompt\": \"x\", \"grammar\": \"root ::= (\"}", "invalid_grammar", "grammar", NULL},
        {"{\"prompt\": \"x\", \"grammar\": 7}", "invalid_type", "grammar", NULL},
        {"{\"prompt\": \"x\", \"json_schema\": {\"type\": \"integer\", \"minimum\": \"a\"}}",
         "invalid_schema", "json_schema", NULL},
        {"{\"prompt\": \"x\", \"json_schema\": {\"type\": \"string\", \"format\": \"xyz\"}}",
         "invalid_schema", "json_schema", "format"},
        {"{\"prompt\": \"x\", \"response_format\": {\"type\": \"xml\"}}", "invalid_value",
         "response_format", NULL},
        {"{\"prompt\": \"x\", \"response_format\": \"json\"}", "invalid_type", "response_format",
         NULL},
        {"{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\"}}",
         "missing_required_parameter", "response_format", NULL},
        {"{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
         "{\"schema\": {\"type\": 5}}}}",
         "invalid_schema", "response_format", NULL},
        {"{\"prompt\": \"x\", \"grammar\": \"root ::= \\\"a\\\"\", \"json_schema\": {}}",
         "invalid_value", "json_schema", NULL},
        /* fields this server does not handle are refused, never ignored */
        {"{\"prompt\": \"x\", \"best_of\": 2}", "unsupported_parameter", "best_of", "best_of"},
        {"{\"prompt\": \"x\", \"echo\": true}", "unsupported_parameter", "echo", NULL},
        {"{\"prompt\": \"x\", \"suffix\": \"y\"}", "unsupported_parameter", "suffix", NULL},
        {"{\"prompt\": \"x\", \"messages\": []}", "unsupported_parameter", "messages", NULL},
        {"{\"prompt\": \"x\", \"max_completion_tokens\": 3}", "unsupported_parameter",
         "max_completion_tokens", NULL},
        {"{\"prompt\": \"x\", \"stream_options\": {\"include_obfuscation\": true}}",
         "unsupported_parameter", "stream_options", "include_obfuscation"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"functions\": []}",
         "unsupported_parameter", "functions", NULL},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": "
         "\"required\"}",
         "invalid_value", "tool_choice", NULL},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": "
         "\"function\", \"function\": {\"name\": \"a b\"}}]}",
         "invalid_value", "tools", NULL},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"prompt\": \"x\"}",
         "unsupported_parameter", "prompt", NULL},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const bool chat = strstr(bad[i].body, "\"messages\": [{") != NULL;
        resp r =
            http(s.port, "POST", chat ? "/v1/chat/completions" : "/v1/completions", bad[i].body);
        json *doc = json_parse(r.body);
        const char *param = json_str(json_get(json_get(doc, "error"), "param"));
        const char *msg = json_str(json_get(json_get(doc, "error"), "message"));
        CHECKF(is_error(&r, 400, bad[i].code) && param && !strcmp(param, bad[i].param) &&
                   (!bad[i].says || (msg && strstr(msg, bad[i].says))),
               "case %zu: %s", i, bad[i].body);
        json_free(doc);
        resp_free(&r);
    }
    /* "user" is accepted (an identifier for the client's own records) */
    t = complete(s.port, "/v1/completions",
                 "{\"prompt\": \"Once\", \"max_tokens\": 2, \"user\": \"u-1\", \"n\": 1, "
                 "\"stream_options\": null}",
                 &st, fin);
    CHECK(st == 200 && t);
    free(t);
    CHECK_EQ_INT(server_stop(&s, SIGTERM), 0);

    /* --json-schema: the grammar of requests that set none; "text" turns
     * it off, a request's own replaces it */
    const char *args2[] = {"-m", model, "-c", "256", "-j", COLOR_SCHEMA, NULL};
    if (!server_start(&s, args2)) {
        CHECKF(false, "the server did not start with --json-schema");
        free(plain_ref);
        return;
    }
    t = complete(s.port, "/v1/completions",
                 "{\"prompt\": \"Once\", \"max_tokens\": 60, \"seed\": 9}", &st, fin);
    CHECKF(st == 200 && is_color_json(t) && !strcmp(fin, "stop"), "default schema: '%s'",
           t ? t : "-");
    free(t);
    t = complete(s.port, "/v1/completions",
                 "{\"prompt\": \"Once\", \"max_tokens\": 12, \"temperature\": 0, "
                 "\"response_format\": {\"type\": \"text\"}}",
                 &st, fin);
    CHECKF(st == 200 && t && plain_ref && !strcmp(t, plain_ref), "text over the default: '%s'",
           t ? t : "-");
    free(t);
    t = complete(s.port, "/v1/completions",
                 "{\"prompt\": \"Once\", \"max_tokens\": 8, \"grammar\": \"root ::= \\\"no\\\"\"}",
                 &st, fin);
    CHECKF(st == 200 && t && !strcmp(t, "no"), "a request's grammar: '%s'", t ? t : "-");
    free(t);
    CHECK_EQ_INT(server_stop(&s, SIGTERM), 0);
    free(plain_ref);
    /* a default grammar that does not parse: the server does not start */
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "'%s' serve -m '%s' --port 0 --grammar 'root ::= (' 2>&1", g_cllm,
             model);
    FILE *p = popen(cmd, "r");
    char out[2048] = "";
    const size_t n = p ? fread(out, 1, sizeof(out) - 1, p) : 0;
    out[n] = '\0';
    const int rc = p ? pclose(p) : -1;
    CHECKF(WIFEXITED(rc) && WEXITSTATUS(rc) != 0 && strstr(out, "--grammar") &&
               strstr(out, "column"),
           "serve --grammar 'root ::= (': %s", out);
}

/* ---- tools (SmolLM2: its template knows none; calls forced by grammar) --- */

#define TOOLS_JSON                                                                                 \
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "        \
    "\"The weather of a city\", \"parameters\": {\"type\": \"object\", \"properties\": "           \
    "{\"city\": {\"type\": \"string\", \"maxLength\": 20}}, \"required\": [\"city\"], "            \
    "\"additionalProperties\": false}}}, {\"type\": \"function\", \"function\": {\"name\": "       \
    "\"add\", \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": "          \
    "\"integer\", \"maximum\": 999}, \"b\": {\"type\": \"integer\", \"maximum\": 999}}, "          \
    "\"required\": [\"a\", \"b\"], \"additionalProperties\": false}}}]"

static void check_tools(const char *model) {
    server s;
    const char *args[] = {"-m", model, "-c", "1024", NULL};
    if (!server_start(&s, args)) {
        CHECKF(false, "the server did not start");
        return;
    }
    /* required: a call of one of the tools, with arguments of its schema */
    resp r = http(s.port, "POST", "/v1/chat/completions",
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"Weather in Paris?\"}], "
                  "\"tools\": " TOOLS_JSON ", \"tool_choice\": \"required\", \"max_tokens\": 80, "
                  "\"seed\": 3}");
    json *doc = json_parse(r.body);
    const json *ch = json_at(json_get(doc, "choices"), 0);
    const json *call = json_at(json_get(json_get(ch, "message"), "tool_calls"), 0);
    const char *name = json_str(json_get(json_get(call, "function"), "name"));
    const char *args_text = json_str(json_get(json_get(call, "function"), "arguments"));
    json *a = args_text ? json_parse(args_text) : NULL;
    const char *fin = json_str(json_get(ch, "finish_reason"));
    const char *id = json_str(json_get(call, "id"));
    const bool weather = name && !strcmp(name, "get_weather") && json_str(json_get(a, "city"));
    const bool add = name && !strcmp(name, "add") && json_get(a, "a") && json_get(a, "b");
    CHECKF(r.status == 200 && fin && !strcmp(fin, "tool_calls") && (weather || add) && id &&
               !strncmp(id, "call_", 5),
           "required: %s", r.body);
    json_free(a);
    json_free(doc);
    resp_free(&r);
    /* a named function, streamed: tool_calls deltas */
    r = http(s.port, "POST", "/v1/chat/completions",
             "{\"messages\": [{\"role\": \"user\", \"content\": \"Add 2 and 3.\"}], "
             "\"tools\": " TOOLS_JSON
             ", \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"add\"}}, "
             "\"max_tokens\": 80, \"temperature\": 0, \"stream\": true}");
    sse ev;
    parse_sse(r.body, &ev);
    CHECKF(r.status == 200 && ev.framed && !strcmp(ev.finish, "tool_calls") &&
               strstr(r.body, "\"tool_calls\":[{") && strstr(r.body, "\"name\":\"add\"") &&
               strstr(r.body, "\"index\":0"),
           "named, streamed: %s", r.body);
    resp_free(&r);
    /* the round trip: the call and its result go back through the template */
    r = http(s.port, "POST", "/v1/chat/completions",
             "{\"messages\": [{\"role\": \"user\", \"content\": \"Weather in Paris?\"}, "
             "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call_1\", "
             "\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": "
             "\"{\\\"city\\\": \\\"Paris\\\"}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": "
             "\"call_1\", \"content\": \"sunny, 21 C\"}], \"tools\": " TOOLS_JSON
             ", \"tool_choice\": \"none\", \"max_tokens\": 24, \"temperature\": 0}");
    char finish[32] = "";
    char *t = whole_text(&r, finish, sizeof(finish));
    CHECKF(r.status == 200 && t && t[0] && strcmp(finish, "tool_calls") != 0, "round trip: %s",
           r.body);
    free(t);
    resp_free(&r);
    /* a response_format beside a forced call; a tool_choice naming no tool */
    r = http(s.port, "POST", "/v1/chat/completions",
             "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": " TOOLS_JSON
             ", \"tool_choice\": \"required\", \"response_format\": {\"type\": \"json_object\"}}");
    CHECK(is_error(&r, 400, "invalid_value"));
    resp_free(&r);
    r = http(s.port, "POST", "/v1/chat/completions",
             "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": " TOOLS_JSON
             ", \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"nope\"}}}");
    CHECK(is_error(&r, 400, "invalid_value") && strstr(r.body, "nope"));
    resp_free(&r);
    CHECK_EQ_INT(server_stop(&s, SIGTERM), 0);
}

/* The text of choice i of a whole completion; a new string or NULL. */
static char *choice_text(const resp *r, size_t i) {
    json *doc = json_parse(r->body);
    const json *ch = json_at(json_get(doc, "choices"), i);
    const char *t = json_str(json_get(ch, "text"));
    char *out = t && (size_t)json_num(json_get(ch, "index")) == i ? strdup(t) : NULL;
    json_free(doc);
    return out;
}

/* A list of prompts on /v1/completions (strings and token ids, whole and
 * streamed): choice i answers prompt i as it would alone; /tokenize and
 * /detokenize round trips; /slots off without --slots. */
static void check_prompt_list(const char *model) {
    server s;
    const char *args[] = {"-m", model, "--parallel", "2", "-c", "512", NULL};
    if (!server_start(&s, args)) {
        CHECKF(false, "the server did not start");
        return;
    }
    const char *one = "{\"prompt\": \"" STORY_PROMPT "\", \"temperature\": 0, \"max_tokens\": 12}";
    const char *two = "{\"prompt\": \"Once upon\", \"temperature\": 0, \"max_tokens\": 12}";
    resp r = http(s.port, "POST", "/v1/completions", one);
    char *ref0 = whole_text(&r, NULL, 0);
    const long p0 = usage_field(&r, "prompt_tokens");
    resp_free(&r);
    r = http(s.port, "POST", "/v1/completions", two);
    char *ref1 = whole_text(&r, NULL, 0);
    const long p1 = usage_field(&r, "prompt_tokens");
    resp_free(&r);
    CHECK(ref0 && ref1 && *ref0 && *ref1);

    const char *list = "{\"prompt\": [\"" STORY_PROMPT "\", \"Once upon\"], \"temperature\": 0, "
                       "\"max_tokens\": 12}";
    r = http(s.port, "POST", "/v1/completions", list);
    char *t0 = choice_text(&r, 0), *t1 = choice_text(&r, 1);
    CHECKF(r.status == 200 && t0 && t1 && ref0 && ref1 && !strcmp(t0, ref0) && !strcmp(t1, ref1),
           "list: %d %s", r.status, r.body);
    CHECKF(usage_field(&r, "prompt_tokens") == p0 + p1, "list usage: %s", r.body);
    free(t0);
    free(t1);
    resp_free(&r);

    /* the first prompt as token ids, from /tokenize (BOS as a prompt has) */
    r = http(s.port, "POST", "/tokenize",
             "{\"content\": \"" STORY_PROMPT "\", \"add_special\": true}");
    json *doc = json_parse(r.body);
    const json *toks = json_get(doc, "tokens");
    char body[4096] = "{\"temperature\": 0, \"max_tokens\": 12, \"prompt\": [";
    for (size_t i = 0; i < json_len(toks); i++) {
        char num[32];
        snprintf(num, sizeof(num), "%s%d", i ? "," : "", (int)json_num(json_at(toks, i)));
        strncat(body, num, sizeof(body) - strlen(body) - 1);
    }
    strncat(body, "]}", sizeof(body) - strlen(body) - 1);
    CHECKF(r.status == 200 && (long)json_len(toks) == p0, "tokenize: %s", r.body);
    json_free(doc);
    resp_free(&r);
    r = http(s.port, "POST", "/v1/completions", body);
    t0 = whole_text(&r, NULL, 0);
    CHECKF(r.status == 200 && t0 && ref0 && !strcmp(t0, ref0), "token ids: %s", r.body);
    free(t0);
    resp_free(&r);

    /* streamed: each choice's deltas together give its text */
    const char *slist = "{\"prompt\": [\"" STORY_PROMPT "\", \"Once upon\"], \"temperature\": 0, "
                        "\"max_tokens\": 12, \"stream\": true}";
    r = http(s.port, "POST", "/v1/completions", slist);
    char got[2][4096] = {"", ""};
    bool framed = strstr(r.body, "data: [DONE]") != NULL;
    for (const char *p = r.body; (p = strstr(p, "data: {"));) {
        const char *end = strstr(p, "\n\n");
        if (!end) break;
        char *data = strndup(p + 6, (size_t)(end - p - 6));
        json *d = json_parse(data);
        const json *ch = json_at(json_get(d, "choices"), 0);
        const long idx = (long)json_num(json_get(ch, "index"));
        const char *t = json_str(json_get(ch, "text"));
        if (t && (idx == 0 || idx == 1))
            strncat(got[idx], t, sizeof(got[0]) - strlen(got[idx]) - 1);
        framed = framed && d;
        json_free(d);
        free(data);
        p = end;
    }
    CHECKF(framed && ref0 && ref1 && !strcmp(got[0], ref0) && !strcmp(got[1], ref1),
           "streamed list: '%s' '%s'", got[0], got[1]);
    resp_free(&r);

    /* bad lists */
    r = http(s.port, "POST", "/v1/completions", "{\"prompt\": [\"a\", 5], \"max_tokens\": 1}");
    CHECK(is_error(&r, 400, "invalid_type"));
    resp_free(&r);
    r = http(s.port, "POST", "/v1/completions", "{\"prompt\": [[1, -3]], \"max_tokens\": 1}");
    CHECK(is_error(&r, 400, "invalid_value"));
    resp_free(&r);

    /* detokenize: the ids back to the text (the BOS renders as its text) */
    r = http(s.port, "POST", "/tokenize", "{\"content\": \"" STORY_PROMPT "\"}");
    doc = json_parse(r.body);
    toks = json_get(doc, "tokens");
    snprintf(body, sizeof(body), "{\"tokens\": [");
    for (size_t i = 0; i < json_len(toks); i++) {
        char num[32];
        snprintf(num, sizeof(num), "%s%d", i ? "," : "", (int)json_num(json_at(toks, i)));
        strncat(body, num, sizeof(body) - strlen(body) - 1);
    }
    strncat(body, "]}", sizeof(body) - strlen(body) - 1);
    json_free(doc);
    resp_free(&r);
    r = http(s.port, "POST", "/detokenize", body);
    doc = json_parse(r.body);
    const char *back = json_str(json_get(doc, "content"));
    CHECKF(r.status == 200 && back && strstr(back, STORY_PROMPT + 1), "detokenize: %s", r.body);
    json_free(doc);
    resp_free(&r);
    r = http(s.port, "POST", "/tokenize", "{\"content\": \"Once\", \"with_pieces\": true}");
    CHECKF(r.status == 200 && strstr(r.body, "\"piece\":") && strstr(r.body, "\"id\":"),
           "pieces: %s", r.body);
    resp_free(&r);
    r = http(s.port, "POST", "/detokenize", "{\"tokens\": [1, 999999]}");
    CHECK(is_error(&r, 400, "invalid_value"));
    resp_free(&r);
    r = http(s.port, "POST", "/tokenize", "{\"text\": \"Once\"}");
    CHECK(is_error(&r, 400, "unsupported_parameter"));
    resp_free(&r);
    r = http(s.port, "GET", "/tokenize", NULL);
    CHECK(is_error(&r, 405, "method_not_allowed"));
    resp_free(&r);
    r = http(s.port, "GET", "/slots", NULL);
    CHECK(is_error(&r, 404, "not_found"));
    resp_free(&r);
    free(ref0);
    free(ref1);
    CHECK(server_stop(&s, SIGTERM) == 0);
}

/* /apply-template, /props and /slots (--slots) on a chat model. */
static void check_props(const char *model) {
    server s;
    const char *args[] = {"-m", model, "--parallel", "2", "--ctx-per-slot", "256", "--slots", NULL};
    if (!server_start(&s, args)) {
        CHECKF(false, "the server did not start");
        return;
    }
    resp r = http(s.port, "POST", "/apply-template",
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi there\"}]}");
    json *doc = json_parse(r.body);
    const char *prompt = json_str(json_get(doc, "prompt"));
    CHECKF(r.status == 200 && prompt && strstr(prompt, "<|im_start|>user\nHi there<|im_end|>") &&
               strstr(prompt, "<|im_start|>assistant\n"),
           "apply-template: %s", r.body);
    json_free(doc);
    resp_free(&r);
    r = http(s.port, "POST", "/apply-template", "{\"messages\": []}");
    CHECK(is_error(&r, 400, NULL));
    resp_free(&r);
    r = http(s.port, "GET", "/props", NULL);
    doc = json_parse(r.body);
    const json *dg = json_get(doc, "default_generation_settings");
    const char *tmpl = json_str(json_get(doc, "chat_template"));
    CHECKF(r.status == 200 && json_num(json_get(doc, "total_slots")) == 2 &&
               json_num(json_get(dg, "n_ctx")) == 256 &&
               json_get(json_get(dg, "params"), "temperature") && tmpl && strstr(tmpl, "im_start"),
           "props: %s", r.body);
    json_free(doc);
    resp_free(&r);
    r = http(s.port, "GET", "/slots", NULL);
    doc = json_parse(r.body);
    const json *slots = json_get(doc, "slots");
    CHECKF(r.status == 200 && json_len(slots) == 2 &&
               json_num(json_get(json_at(slots, 1), "n_ctx")) == 256 &&
               json_get(json_at(slots, 0), "is_processing"),
           "slots: %s", r.body);
    json_free(doc);
    resp_free(&r);
    r = http(s.port, "POST", "/props", "{}");
    CHECK(is_error(&r, 405, "method_not_allowed"));
    resp_free(&r);
    CHECK(server_stop(&s, SIGTERM) == 0);
}

/* With one HTTP thread and one slot, requests that wait for the engine
 * (queued behind a long generation) hold no thread: /health answers while
 * they wait, with one of each kind of answer that waits for its jobs
 * (Ollama's whole answers and embeddings, a list of prompts,
 * /v1/embeddings). Any of them holding the thread would hold /health. */
static void check_waits_hold_no_thread(const char *model) {
    server s;
    const char *args[] = {"-m",           model,       "--parallel",     "1",
                          "-c",           "1024",      "--http-threads", "1",
                          "--embeddings", "--pooling", "mean",           NULL};
    if (!server_start(&s, args)) {
        CHECKF(false, "the server did not start");
        return;
    }
    static const struct {
        const char *path, *body;
    } k_waits[] = {
        {"/api/generate", "{\"model\": \"m\", \"prompt\": \"Hello\", \"stream\": false, "
                          "\"options\": {\"num_predict\": 4}}"},
        {"/api/chat", "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": "
                      "\"Hi\"}], \"stream\": false, \"options\": {\"num_predict\": 4}}"},
        {"/api/embed", "{\"model\": \"m\", \"input\": [\"one\", \"two\"]}"},
        {"/v1/completions", "{\"prompt\": [\"Once\", \"Twice\"], \"max_tokens\": 4}"},
        {"/v1/embeddings", "{\"input\": \"Hello\"}"},
    };
    enum { N_WAITS = sizeof(k_waits) / sizeof(k_waits[0]) };
    /* the slot's job: long enough that what waits behind it waits seconds */
    const char *slow = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 300, \"ignore_eos\": "
                       "true, \"temperature\": 0}";
    const double t0 = now_s();
    const int fd_slow = send_request(s.port, "POST", "/v1/completions", NULL, slow, strlen(slow));
    usleep(200 * 1000); /* in the slot first */
    int fd[N_WAITS];
    for (size_t i = 0; i < N_WAITS; i++) {
        fd[i] = send_request(s.port, "POST", k_waits[i].path, NULL, k_waits[i].body,
                             strlen(k_waits[i].body));
    }
    usleep(300 * 1000); /* waiting behind it */
    const double t_health = now_s();
    resp h = http(s.port, "GET", "/health", NULL);
    const double t_answered = now_s(), health_s = t_answered - t_health;
    CHECKF(h.status == 200 && health_s < 2.0,
           "a request waiting for the engine held the only HTTP thread: /health %d after %.2f s",
           h.status, health_s);
    resp_free(&h);
    for (size_t i = 0; i < N_WAITS; i++) {
        resp w = {0};
        if (fd[i] < 0 || !read_response(fd[i], &w)) w.status = -1;
        CHECKF(w.status == 200, "%s: %d %.200s", k_waits[i].path, w.status, w.body ? w.body : "");
        resp_free(&w);
    }
    resp sl = {0};
    if (fd_slow < 0 || !read_response(fd_slow, &sl)) sl.status = -1;
    const double t_done = now_s();
    CHECKF(sl.status == 200, "the slow request: %d %.200s", sl.status, sl.body ? sl.body : "");
    resp_free(&sl);
    /* /health said nothing if the waits were over before it asked */
    CHECKF(t_done > t_answered + 0.5,
           "the requests were answered %.2f s after they were sent, "
           "too fast to tell",
           t_done - t0);
    CHECK(server_stop(&s, SIGTERM) == 0);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_serve PATH-TO-CLLM\n");
        return 2;
    }
    g_cllm = argv[1];
    signal(SIGPIPE, SIG_IGN);
    /* built without libmicrohttpd: the command says so */
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "'%s' serve --help >/dev/null 2>&1", g_cllm);
    CHECK(system(cmd) == 0);
#ifndef CLLM_HAVE_SERVE
    check_missing("cllm serve (built without libmicrohttpd and jansson: apt-get install "
                  "libmicrohttpd-dev libjansson-dev)");
    return check_summary("test_serve");
#endif
    static const char *files[] = {"stories260K.gguf", NULL};
    if (refs_have(files)) {
        char model[4096];
        refs_model_path(model, sizeof(model), "stories260K.gguf");
        check_stories(model);
        check_stream_metrics(model);
        check_draft_model(model);
        check_hosts(model);
        check_names_cors(model);
        check_structured(model);
        check_prompt_list(model);
    }
    char smol[4096];
    if (refs_fetch_model("smollm2", smol, sizeof(smol))) {
        check_smollm2(smol);
        check_tools(smol);
        check_props(smol);
        check_waits_hold_no_thread(smol);
        bool decided = false;
        for (int i = 0; i < 3 && !decided; i++) decided = check_queue_timeout(smol);
        CHECKF(decided, "the machine stayed too busy for the queue check");
    }
    return check_summary("test_serve");
}
