/*
 * cllm serve: the connections' limits (server-conn.c). libmicrohttpd runs
 * every connection on a few polling threads (epoll); a request waiting for
 * the engine is suspended, so no thread waits with it. A watcher thread
 * closes what libmicrohttpd's own idle timeout does not catch: request
 * headers that take longer than a deadline, bodies that arrive below a
 * minimum rate, and reads longer than --timeout; and it cancels the job of a
 * suspended request whose client reset the connection.
 *
 * Each connection moves through the phases below; server-http.c and
 * server-reply.c (srv_wait) say when.
 * The framing headers of a request are checked here too.
 */
#ifndef CLLM_TOOLS_SERVER_CONN_H
#define CLLM_TOOLS_SERVER_CONN_H

#include "server.h"

#include <microhttpd.h>

typedef enum srv_phase {
    SRV_PHASE_HEAD = 0, /* waiting for a request's headers (new, or kept alive) */
    SRV_PHASE_BODY,     /* headers read: receiving the body */
    SRV_PHASE_WAIT,     /* suspended until the engine ends its job (whole answer) */
    SRV_PHASE_SEND,     /* answering (a stream included) */
    SRV_PHASE_COUNT
} srv_phase;

typedef struct srv_conns srv_conns;

/* The watcher over the limits in `l` (its thread started); NULL after
 * printing why. */
srv_conns *srv_conns_new(const srv_limits *l, bool verbose);
/* Stops the watcher (after the daemon is stopped) and frees it; NULL does
 * nothing. */
void srv_conns_free(srv_conns *w);
/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION callback (cls: the watcher). */
void srv_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                      enum MHD_ConnectionNotificationCode code);
/* The connection enters phase p (from the request's handler). */
void srv_conns_phase(srv_conns *w, struct MHD_Connection *c, srv_phase p);
/* n more bytes of the body arrived. */
void srv_conns_body(srv_conns *w, struct MHD_Connection *c, size_t n);
/* The connection is suspended until the n jobs of e in jobs[] (kept by
 * the caller until then) end (SRV_PHASE_WAIT): if the client resets it
 * meanwhile, they are cancelled. Call before taking e's mutex;
 * SRV_PHASE_SEND (or the end of the request) forgets them. */
void srv_conns_wait(srv_conns *w, struct MHD_Connection *c, srv_engine *e, srv_job *const *jobs,
                    size_t n);

/* What the framing headers of a request say is wrong with it, or NULL:
 * differing Content-Length headers, or one not a number; Content-Length
 * with Transfer-Encoding; more than one Transfer-Encoding, or one other
 * than chunked; a NUL or control byte in a header. Such a request is
 * answered 400 from its headers and the connection closed, as two parsers
 * in a row (a proxy, then this server) could read its body differently. */
const char *srv_framing_error(struct MHD_Connection *c);

#endif /* CLLM_TOOLS_SERVER_CONN_H */
