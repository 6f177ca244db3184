/* cllm serve: the chat page (server.h). GET / answers index.html, GET
 * /webui/NAME its other files (tools/cllm/webui/, embedded at build time by
 * cmake/embed-files.cmake). The page calls the same origin's
 * /v1/chat/completions; a Content-Security-Policy lets it load its own
 * script and style and talk to its own origin only. */
#include "server.h"

#include <stdio.h>
#include <string.h>

#include "webui-files.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* The page's own files only: no inline script or style, no other origin,
 * not framed, no plug-ins, no form posted anywhere. */
static const char k_csp[] = "default-src 'none'; script-src 'self'; style-src 'self'; "
                            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
                            "form-action 'none'; frame-ancestors 'none'";

/* The file a path names: "/" the page, "/webui/NAME" another; -1: none. */
static int webui_file(const char *url) {
    const char *name = !strcmp(url, "/")             ? "index.html"
                       : !strncmp(url, "/webui/", 7) ? url + 7
                                                     : NULL;
    if (!name) return -1;
    for (size_t i = 0; i < N_OF(srv_webui_files); i++) {
        if (!strcmp(name, srv_webui_files[i].name)) return (int)i;
    }
    return -1;
}

static const char *content_type(const char *name) {
    const char *dot = strrchr(name, '.');
    if (dot && !strcmp(dot, ".html")) return "text/html; charset=utf-8";
    if (dot && !strcmp(dot, ".css")) return "text/css; charset=utf-8";
    if (dot && !strcmp(dot, ".js")) return "text/javascript; charset=utf-8";
    return "application/octet-stream";
}

bool srv_webui_path(const char *url) { return !strcmp(url, "/") || !strncmp(url, "/webui/", 7); }

enum MHD_Result srv_webui(const srv_http *h, struct MHD_Connection *c, const char *url,
                          const char *method) {
    srv_req_err er = {0};
    const int f = webui_file(url);
    if (f < 0) {
        srv_fail(&er, 404, NULL, "not_found", "no file %.200s in the chat page", url);
        return srv_send_error(h, c, &er);
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        srv_fail(&er, 405, NULL, "method_not_allowed", "%.200s takes GET, not %.32s", url, method);
        return srv_send_error(h, c, &er);
    }
    /* the bytes are static: libmicrohttpd sends them without a copy (and
     * no body for HEAD) */
    struct MHD_Response *r = MHD_create_response_from_buffer(
        srv_webui_files[f].size, (void *)srv_webui_files[f].bytes, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", content_type(srv_webui_files[f].name));
    MHD_add_response_header(r, "Content-Security-Policy", k_csp);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    /* a new build's page is fetched again, never a stale copy */
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    const enum MHD_Result res = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return res;
}
