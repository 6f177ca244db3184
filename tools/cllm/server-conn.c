/* cllm serve: the connections' limits: the watcher of server-conn.h. */
#include "server-conn.h"

#include "cllm.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <sys/resource.h>
#include <sys/socket.h>

/* One connection, from libmicrohttpd's start notice to its close notice
 * (its socket context). All fields under the watcher's mutex. */
typedef struct srv_sock {
    int fd;
    srv_phase phase;
    double t0;     /* cllm_time_ms() when the phase began */
    double req_t0; /* when the request's headers began (SRV_PHASE_HEAD) */
    size_t body;   /* body bytes of the request */
    srv_engine *e; /* SRV_PHASE_WAIT: the jobs to cancel on a reset */
    srv_job *const *jobs;
    size_t n_jobs;
    bool closing; /* shut down by the watcher */
    struct srv_sock *prev, *next;
} srv_sock;

struct srv_conns {
    srv_limits l;
    bool verbose;
    pthread_mutex_t mu;
    pthread_cond_t tick; /* for a prompt stop */
    srv_sock *head;
    bool stop;
    pthread_t thread;
};

/* Why a connection in `s` is closed now, or NULL. */
static const char *overdue(const srv_conns *w, const srv_sock *s, double now) {
    const double in_phase = (now - s->t0) / 1e3, in_request = (now - s->req_t0) / 1e3;
    switch (s->phase) {
    case SRV_PHASE_HEAD:
        if (in_phase > w->l.header_s) return "no complete request headers within --header-timeout";
        return NULL;
    case SRV_PHASE_BODY:
        if (w->l.read_s > 0 && in_request > w->l.read_s) return "the request took over --timeout";
        if (in_phase > w->l.header_s &&
            (double)s->body < (in_phase - w->l.header_s) * w->l.min_rate) {
            return "the body arrives below --min-body-rate";
        }
        return NULL;
    default: return NULL;
    }
}

static void *watch(void *arg) {
    srv_conns *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        const double now = cllm_time_ms();
        for (srv_sock *s = w->head; s; s = s->next) {
            if (s->closing) continue;
            const char *why = overdue(w, s, now);
            if (why) {
                /* libmicrohttpd sees the end of the stream and closes it */
                s->closing = true;
                (void)shutdown(s->fd, SHUT_RDWR);
                if (w->verbose) fprintf(stderr, "cllm serve: closed a connection: %s\n", why);
                continue;
            }
            if (s->phase == SRV_PHASE_WAIT && s->n_jobs > 0) {
                /* a reset (not a half-close: POLLRDHUP is not asked for) */
                struct pollfd p = {.fd = s->fd, .events = 0};
                if (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR))) {
                    pthread_mutex_lock(&s->e->mu);
                    for (size_t i = 0; i < s->n_jobs; i++) s->jobs[i]->cancel = true;
                    pthread_cond_signal(&s->e->work);
                    pthread_mutex_unlock(&s->e->mu);
                    s->jobs = NULL;
                    s->n_jobs = 0;
                    if (w->verbose) fprintf(stderr, "cllm serve: a client reset its request\n");
                }
            }
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&w->tick, &w->mu, &ts);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

srv_conns *srv_conns_new(const srv_limits *l, bool verbose) {
    /* a descriptor per connection, and some for the model and the rest */
    struct rlimit rl;
    const rlim_t need = (rlim_t)l->max_conns + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < need) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
        if (rl.rlim_cur < need) {
            fprintf(stderr,
                    "cllm serve: --max-connections %d needs %llu file descriptors; the limit is "
                    "%llu (ulimit -n)\n",
                    l->max_conns, (unsigned long long)need, (unsigned long long)rl.rlim_cur);
            return NULL;
        }
    }
    srv_conns *w = calloc(1, sizeof(*w));
    if (!w) return NULL;
    w->l = *l;
    w->verbose = verbose;
    if (pthread_mutex_init(&w->mu, NULL) != 0) goto fail_mu;
    if (pthread_cond_init(&w->tick, NULL) != 0) goto fail_cond;
    if (pthread_create(&w->thread, NULL, watch, w) != 0) goto fail_thread;
    return w;
fail_thread:
    pthread_cond_destroy(&w->tick);
fail_cond:
    pthread_mutex_destroy(&w->mu);
fail_mu:
    free(w);
    fprintf(stderr, "cllm serve: cannot start the connections' watcher\n");
    return NULL;
}

void srv_conns_free(srv_conns *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_signal(&w->tick);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    while (w->head) { /* the daemon stopped: none should be left */
        srv_sock *s = w->head;
        w->head = s->next;
        free(s);
    }
    pthread_cond_destroy(&w->tick);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

void srv_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                      enum MHD_ConnectionNotificationCode code) {
    srv_conns *w = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        srv_sock *s = ci ? calloc(1, sizeof(*s)) : NULL;
        *socket_context = s;
        if (!s) return; /* not watched: only libmicrohttpd's idle timeout */
        s->fd = ci->connect_fd;
        s->phase = SRV_PHASE_HEAD;
        s->t0 = s->req_t0 = cllm_time_ms();
        pthread_mutex_lock(&w->mu);
        s->next = w->head;
        if (w->head) w->head->prev = s;
        w->head = s;
        pthread_mutex_unlock(&w->mu);
        return;
    }
    /* closed: before its socket is, so the watcher never shuts down a
     * descriptor that was reused */
    srv_sock *s = *socket_context;
    if (!s) return;
    pthread_mutex_lock(&w->mu);
    if (s->prev)
        s->prev->next = s->next;
    else
        w->head = s->next;
    if (s->next) s->next->prev = s->prev;
    pthread_mutex_unlock(&w->mu);
    free(s);
    *socket_context = NULL;
}

static srv_sock *sock_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void srv_conns_phase(srv_conns *w, struct MHD_Connection *c, srv_phase p) {
    srv_sock *s = sock_of(c);
    if (!s) return;
    pthread_mutex_lock(&w->mu);
    if (s->phase != p) {
        s->phase = p;
        s->t0 = cllm_time_ms();
        if (p == SRV_PHASE_HEAD) s->req_t0 = s->t0, s->body = 0;
        if (p == SRV_PHASE_BODY) s->body = 0;
    }
    if (p != SRV_PHASE_WAIT) s->e = NULL, s->jobs = NULL, s->n_jobs = 0;
    pthread_mutex_unlock(&w->mu);
}

void srv_conns_body(srv_conns *w, struct MHD_Connection *c, size_t n) {
    srv_sock *s = sock_of(c);
    if (!s) return;
    pthread_mutex_lock(&w->mu);
    s->body += n;
    pthread_mutex_unlock(&w->mu);
}

void srv_conns_wait(srv_conns *w, struct MHD_Connection *c, srv_engine *e, srv_job *const *jobs,
                    size_t n) {
    srv_sock *s = sock_of(c);
    if (!s) return;
    pthread_mutex_lock(&w->mu);
    if (s->phase != SRV_PHASE_WAIT) s->t0 = cllm_time_ms();
    s->phase = SRV_PHASE_WAIT;
    s->e = e;
    s->jobs = jobs;
    s->n_jobs = n;
    pthread_mutex_unlock(&w->mu);
}

/* The framing headers of a request, as srv_framing_error reads them. */
typedef struct framing {
    const char *why;
    int n_length, n_coding;
    const char *length, *coding;
} framing;

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      size_t key_size, const char *value, size_t value_size) {
    (void)kind;
    framing *f = cls;
    if (strlen(key) != key_size || (value && strlen(value) != value_size)) {
        f->why = "a header holds a NUL byte";
        return MHD_NO;
    }
    for (size_t i = 0; value && i < value_size; i++) {
        const unsigned char ch = (unsigned char)value[i];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
            f->why = "a header value holds a control character";
            return MHD_NO;
        }
    }
    if (!strcasecmp(key, "Content-Length")) {
        if (f->n_length++ && strcmp(f->length, value ? value : "") != 0) {
            f->why = "two Content-Length headers that differ";
            return MHD_NO;
        }
        f->length = value ? value : "";
        if (!*f->length || strspn(f->length, "0123456789") != strlen(f->length)) {
            f->why = "a Content-Length that is not a number";
            return MHD_NO;
        }
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        f->n_coding++;
        f->coding = value ? value : "";
    }
    return MHD_YES;
}

const char *srv_framing_error(struct MHD_Connection *c) {
    framing f = {0};
    MHD_get_connection_values_n(c, MHD_HEADER_KIND, framing_header, &f);
    if (f.why) return f.why;
    if (f.n_coding > 1) return "more than one Transfer-Encoding header";
    if (f.n_coding && f.n_length) return "both Content-Length and Transfer-Encoding";
    if (f.n_coding && strcasecmp(f.coding, "chunked") != 0)
        return "a Transfer-Encoding other than chunked";
    return NULL;
}
