/* Models by name: GGUF files of a Hugging Face hub into the cache
 * (download.h), SHA-256, the cache directory. */
#include "download.h"
#include "cllm.h"
#include "commands.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* ---- SHA-256 (FIPS 180-4, section 6.2) ---------------------------------- */

static const uint32_t k_sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t rotr(uint32_t x, int n) { return x >> n | x << (32 - n); }

/* One 64-byte block into the state. */
static void sha256_block(uint32_t h[8], const uint8_t *p) {
    uint32_t w[64];
    for (int t = 0; t < 16; t++) {
        w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 |
               (uint32_t)p[4 * t + 2] << 8 | (uint32_t)p[4 * t + 3];
    }
    for (int t = 16; t < 64; t++) {
        const uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ w[t - 15] >> 3;
        const uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ w[t - 2] >> 10;
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int t = 0; t < 64; t++) {
        const uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                            k_sha256_k[t] + w[t];
        const uint32_t t2 =
            (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

void cli_sha256_init(cli_sha256 *s) {
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, h0, sizeof(h0));
    s->n = 0;
}

void cli_sha256_update(cli_sha256 *s, const void *data, size_t len) {
    const uint8_t *p = data;
    size_t fill = (size_t)(s->n % 64);
    s->n += len;
    if (fill) {
        const size_t take = len < 64 - fill ? len : 64 - fill;
        memcpy(s->buf + fill, p, take);
        p += take, len -= take, fill += take;
        if (fill < 64) return;
        sha256_block(s->h, s->buf);
    }
    for (; len >= 64; p += 64, len -= 64) sha256_block(s->h, p);
    memcpy(s->buf, p, len);
}

void cli_sha256_hex(cli_sha256 *s, char out[65]) {
    const uint64_t bits = s->n * 8;
    size_t fill = (size_t)(s->n % 64);
    s->buf[fill++] = 0x80;
    if (fill > 56) {
        memset(s->buf + fill, 0, 64 - fill);
        sha256_block(s->h, s->buf);
        fill = 0;
    }
    memset(s->buf + fill, 0, 56 - fill);
    for (int i = 0; i < 8; i++) s->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_block(s->h, s->buf);
    for (int i = 0; i < 8; i++) snprintf(out + 8 * i, 9, "%08x", (unsigned)s->h[i]);
}

/* ---- the cache ------------------------------------------------------------ */

static char *str_printf(const char *fmt, ...) CLI_PRINTF(1, 2);

static char *str_printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

char *cli_cache_dir(const char *cmd) {
    const char *c = getenv("CLLM_CACHE"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    char *dir = c && *c   ? strdup(c)
                : x && *x ? str_printf("%s/cllm", x)
                : h && *h ? str_printf("%s/.cache/cllm", h)
                          : NULL;
    if (!dir) {
        cli_error(cmd, (c && *c) || (x && *x) || (h && *h)
                           ? "out of memory"
                           : "no cache directory: set CLLM_CACHE (or HOME)");
    }
    return dir;
}

bool cli_is_hf_option(const char *o) { return cli_is_one_of(o, "-hf -hfr --hf-repo"); }

bool cli_model_from_hf(const char *cmd, const char *hf, const char **model) {
    static char *path; /* the process's one model by name */
    if (!hf) return true;
    if (*model) {
        cli_error(cmd, "give the model once: -m FILE or -hf REPO[:QUANT], not both");
        return false;
    }
    char **paths = NULL;
    int n = 0;
    if (!cli_hf_pull(cmd, hf, false, &paths, &n)) return false;
    for (int i = 1; i < n; i++) free(paths[i]);
    free(path);
    path = paths[0];
    free(paths);
    *model = path;
    return true;
}

int cli_model_arg(const char *cmd, const char *hf, const char **model) {
    if (!*model == !hf) {
        cli_error(cmd, hf ? "give the model once: -m FILE or -hf USER/NAME[:QUANT], not both"
                          : "no model given (-m FILE or -hf USER/NAME[:QUANT])");
        return 2;
    }
    return cli_model_from_hf(cmd, hf, model) ? 0 : 1;
}

#ifndef CLLM_HAVE_PULL

bool cli_hf_pull(const char *cmd, const char *spec, bool keep_parts, char ***paths, int *n) {
    (void)spec, (void)keep_parts, (void)paths, (void)n;
    cli_error(cmd, "this cllm was built without downloads (it needs libcurl and jansson at "
                   "build time: libcurl4-openssl-dev, libjansson-dev); download the GGUF file "
                   "yourself and give it with -m");
    return false;
}

#else /* CLLM_HAVE_PULL */

#include <ctype.h>
#include <curl/curl.h>
#include <sys/file.h>
#include <jansson.h>
#include <time.h>
#include <unistd.h>

/* mkdir -p of the directories above `path` (its last component is a file). */
static bool make_parents(const char *cmd, const char *path) {
    char *p = strdup(path);
    if (!p) {
        cli_error(cmd, "out of memory");
        return false;
    }
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            cli_error(cmd, "cannot make directory %s: %s", p, strerror(errno));
            free(p);
            return false;
        }
        *s = '/';
    }
    free(p);
    return true;
}

#define API_MAX_BYTES ((size_t)32 << 20) /* a repository listing larger than this is refused */
#define RETRIES       4                  /* tries of a download cut short, each resuming */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The hub: its endpoint (no trailing '/') and the headers every request sends. */
typedef struct hub {
    char *endpoint;
    struct curl_slist *headers;
    bool curl_started;
} hub;

static void hub_free(hub *h) {
    free(h->endpoint);
    curl_slist_free_all(h->headers);
    if (h->curl_started) curl_global_cleanup();
}

static bool hub_init(const char *cmd, hub *h) {
    memset(h, 0, sizeof(*h));
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        cli_error(cmd, "cannot start libcurl");
        return false;
    }
    h->curl_started = true;
    const char *e = getenv("HF_ENDPOINT");
    if (!e || !*e) e = "https://huggingface.co";
    size_t len = strlen(e);
    while (len > 0 && e[len - 1] == '/') len--;
    h->endpoint = strndup(e, len);
    char ua[64];
    snprintf(ua, sizeof(ua), "User-Agent: cllm/%s", cllm_version());
    struct curl_slist *l = curl_slist_append(NULL, ua);
    const char *tok = getenv("HF_TOKEN");
    if (l && tok && *tok) {
        char *auth = str_printf("Authorization: Bearer %s", tok);
        struct curl_slist *l2 = auth ? curl_slist_append(l, auth) : NULL;
        free(auth);
        if (!l2) curl_slist_free_all(l);
        l = l2;
    }
    h->headers = l;
    if (!h->endpoint || !l) {
        cli_error(cmd, "out of memory");
        hub_free(h);
        return false;
    }
    return true;
}

static void common_opts(CURL *c, const hub *h, const char *url) {
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h->headers);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    /* a connection that stalls (under 1 byte/s for 60 s) counts as cut */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
}

/* An HTTP status as a reason a person can act on. */
static const char *status_hint(long code) {
    switch (code) {
    case 401:
    case 403: return " (a gated or private repository: set HF_TOKEN to a token with access)";
    case 404: return " (no such repository, revision or file)";
    case 429: return " (rate limited: try again later, or set HF_TOKEN)";
    default: return "";
    }
}

/* ---- small GETs (the API) ---- */

typedef struct membuf {
    char *p;
    size_t len;
    bool too_big;
} membuf;

static size_t mem_write(char *data, size_t size, size_t nmemb, void *ud) {
    membuf *b = ud;
    const size_t n = size * nmemb;
    if (b->len + n > API_MAX_BYTES) {
        b->too_big = true;
        return 0;
    }
    char *p = realloc(b->p, b->len + n + 1);
    if (!p) return 0;
    memcpy(p + b->len, data, n);
    b->p = p;
    b->len += n;
    p[b->len] = '\0';
    return n;
}

/* GET url into a new NUL-terminated string (JSON), or NULL after printing. */
static char *http_get(const char *cmd, const hub *h, const char *url) {
    CURL *c = curl_easy_init();
    if (!c) {
        cli_error(cmd, "cannot start libcurl");
        return NULL;
    }
    membuf b = {0};
    common_opts(c, h, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, mem_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    const CURLcode rc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    if (rc != CURLE_OK || code != 200) {
        if (b.too_big) {
            cli_error(cmd, "%s: the answer is larger than %zu MiB", url, API_MAX_BYTES >> 20);
        } else if (rc != CURLE_OK) {
            cli_error(cmd, "%s: %s", url, curl_easy_strerror(rc));
        } else {
            cli_error(cmd, "%s: HTTP %ld%s", url, code, status_hint(code));
        }
        free(b.p);
        return NULL;
    }
    if (!b.p) b.p = strdup("");
    return b.p;
}

/* ---- progress bar ---- */

typedef struct bar {
    bool show; /* stderr is a terminal */
    const char *name;
    uint64_t base;   /* bytes there before this transfer (resumed) */
    uint64_t total;  /* of the whole file (0: unknown) */
    double t0, last; /* start of this transfer, last draw */
    bool drawn;
} bar;

static void fmt_bytes(char *out, size_t size, double b) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) b /= 1024, u++;
    snprintf(out, size, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
}

static void bar_draw(bar *b, uint64_t done, bool final) {
    if (!b->show) return;
    const double t = now_s();
    if (!final && t - b->last < 0.1) return;
    b->last = t;
    const double el = t - b->t0, rate = el > 0 ? (double)(done - b->base) / el : 0;
    char have[32], all[32], speed[32], left[32] = "--:--";
    fmt_bytes(have, sizeof(have), (double)done);
    fmt_bytes(all, sizeof(all), (double)b->total);
    fmt_bytes(speed, sizeof(speed), rate);
    if (b->total && rate > 0 && done <= b->total) {
        const long s = (long)((double)(b->total - done) / rate);
        if (s >= 3600 && s < 360000) {
            snprintf(left, sizeof(left), "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
        } else if (s < 3600) {
            snprintf(left, sizeof(left), "%ld:%02ld", s / 60, s % 60);
        }
    }
    const int width = 24;
    const int fill = b->total ? (int)((double)done / (double)b->total * width) : 0;
    const int pct = b->total ? (int)(100.0 * (double)done / (double)b->total) : 0;
    fprintf(stderr, "\r%.40s [%.*s%*s] %3d%% %s / %s %s/s %s left\x1b[K", b->name,
            fill > width ? width : fill, "========================", width - fill, "", pct, have,
            all, speed, left);
    b->drawn = true;
}

static void bar_end(bar *b) {
    if (b->drawn) fputc('\n', stderr);
    b->drawn = false;
}

/* ---- one file, resumable ---- */

typedef struct xfer {
    CURL *c;
    FILE *f;
    cli_sha256 sha;
    uint64_t have; /* bytes in the .part file (hashed) */
    bool started;  /* the status of this response was looked at */
    bool restart;  /* the server ignored the Range: the file begins again */
    long code;
    bool write_err;
    bar *bar;
} xfer;

static size_t file_write(char *data, size_t size, size_t nmemb, void *ud) {
    xfer *x = ud;
    const size_t n = size * nmemb;
    if (!x->started) {
        x->started = true;
        curl_easy_getinfo(x->c, CURLINFO_RESPONSE_CODE, &x->code);
        if (x->code == 200 && x->have > 0) { /* the whole file, not the rest: start over */
            if (fflush(x->f) != 0 || ftruncate(fileno(x->f), 0) != 0 ||
                fseek(x->f, 0, SEEK_SET) != 0) {
                x->write_err = true;
                return 0;
            }
            x->have = 0;
            x->bar->base = 0;
            cli_sha256_init(&x->sha);
        }
        if (x->code != 200 && x->code != 206) return 0;
    }
    if (fwrite(data, 1, n, x->f) != n) {
        x->write_err = true;
        return 0;
    }
    cli_sha256_update(&x->sha, data, n);
    x->have += n;
    bar_draw(x->bar, x->have, false);
    return n;
}

/* Hashes what `f` holds (a .part file to resume) into x; false on a read error. */
static bool hash_existing(xfer *x) {
    char buf[1 << 16];
    size_t r;
    rewind(x->f);
    while ((r = fread(buf, 1, sizeof(buf), x->f)) > 0) {
        cli_sha256_update(&x->sha, buf, r);
        x->have += r;
    }
    return !ferror(x->f) && fseek(x->f, 0, SEEK_END) == 0;
}

/* Whether the cache holds `dest` as the hub has it: the file of `size`
 * bytes beside a .sha256 that records the SHA-256 it was checked against. */
static bool cached(const char *dest, const char *sha, uint64_t size) {
    struct stat st;
    if (stat(dest, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size) return false;
    char *side = str_printf("%s.sha256", dest), line[80] = "";
    FILE *f = side ? fopen(side, "r") : NULL;
    free(side);
    if (!f) return false;
    const bool ok = fgets(line, sizeof(line), f) && !strncmp(line, sha, 64);
    fclose(f);
    return ok;
}

/* `part` opened to append and locked (flock): another cllm downloading the
 * same file is waited for. The file locked is the one at that name (not
 * one renamed or removed while this waited). NULL after printing. */
static FILE *open_part(const char *cmd, const char *part, const char *name) {
    for (int tries = 0; tries < 16; tries++) {
        FILE *f = fopen(part, "a+b");
        if (!f) {
            cli_error(cmd, "cannot write %s: %s", part, strerror(errno));
            return NULL;
        }
        if (flock(fileno(f), LOCK_EX | LOCK_NB) != 0) {
            cli_warn(cmd, "%s: another cllm is downloading it; waiting", name);
            if (flock(fileno(f), LOCK_EX) != 0) {
                cli_error(cmd, "cannot lock %s: %s", part, strerror(errno));
                fclose(f);
                return NULL;
            }
        }
        struct stat a, b;
        if (fstat(fileno(f), &a) == 0 && stat(part, &b) == 0 && a.st_dev == b.st_dev &&
            a.st_ino == b.st_ino) {
            return f;
        }
        fclose(f); /* renamed or removed by the one waited for: the name again */
    }
    cli_error(cmd, "cannot lock %s: it keeps being replaced", part);
    return NULL;
}

/*
 * url into dest through dest.part: a .part already there is resumed
 * (Range), a connection cut short is tried again from where it stopped
 * (RETRIES tries), the bytes are checked against `size` and the SHA-256
 * `sha` (64 lowercase hex digits) before the .part becomes dest.
 */
static bool fetch_file(const char *cmd, const hub *h, const char *url, const char *dest,
                       const char *name, const char *sha, uint64_t size) {
    if (cached(dest, sha, size)) return true;
    if (!make_parents(cmd, dest)) return false;
    char *part = str_printf("%s.part", dest), *side = str_printf("%s.sha256", dest);
    xfer x = {0};
    bar b = {.show = isatty(2) == 1, .name = name, .total = size};
    bool ok = false;
    if (!part || !side) {
        cli_error(cmd, "out of memory");
        goto done;
    }
    if (!(x.f = open_part(cmd, part, name))) goto done;
    if (cached(dest, sha, size)) { /* another cllm downloaded it meanwhile */
        remove(part);              /* the empty one this made */
        ok = true;
        goto done;
    }
    cli_sha256_init(&x.sha);
    if (!hash_existing(&x)) {
        cli_error(cmd, "cannot read %s: %s", part, strerror(errno));
        goto done;
    }
    if (x.have > size) { /* not this file's beginning: start over */
        if (ftruncate(fileno(x.f), 0) != 0 || fseek(x.f, 0, SEEK_SET) != 0) {
            cli_error(cmd, "cannot truncate %s: %s", part, strerror(errno));
            goto done;
        }
        x.have = 0;
        cli_sha256_init(&x.sha);
    }
    x.bar = &b;
    CURLcode rc = CURLE_OK;
    for (int attempt = 0; x.have < size && attempt < RETRIES; attempt++) {
        if (!(x.c = curl_easy_init())) {
            cli_error(cmd, "cannot start libcurl");
            goto done;
        }
        x.started = false;
        x.code = 0;
        b.base = x.have;
        b.t0 = now_s();
        common_opts(x.c, h, url);
        curl_easy_setopt(x.c, CURLOPT_WRITEFUNCTION, file_write);
        curl_easy_setopt(x.c, CURLOPT_WRITEDATA, &x);
        char range[48];
        if (x.have > 0) {
            snprintf(range, sizeof(range), "%llu-", (unsigned long long)x.have);
            curl_easy_setopt(x.c, CURLOPT_RANGE, range);
        }
        rc = curl_easy_perform(x.c);
        if (!x.started) curl_easy_getinfo(x.c, CURLINFO_RESPONSE_CODE, &x.code);
        curl_easy_cleanup(x.c);
        x.c = NULL;
        if (x.write_err || fflush(x.f) != 0) {
            bar_end(&b);
            cli_error(cmd, "cannot write %s: %s", part, strerror(errno));
            goto done;
        }
        if (x.code != 0 && x.code != 200 && x.code != 206) {
            bar_end(&b);
            cli_error(cmd, "%s: HTTP %ld%s", url, x.code, status_hint(x.code));
            goto done;
        }
        if (rc == CURLE_OK && x.have < size) {
            bar_end(&b);
            cli_error(cmd, "%s: the server sent %llu bytes, the hub lists %llu", url,
                      (unsigned long long)x.have, (unsigned long long)size);
            goto done;
        }
        if (rc != CURLE_OK && x.have < size && attempt + 1 < RETRIES) {
            bar_end(&b);
            cli_warn(cmd, "%s: %s after %llu of %llu bytes; resuming", name, curl_easy_strerror(rc),
                     (unsigned long long)x.have, (unsigned long long)size);
        }
    }
    bar_draw(&b, x.have, true);
    bar_end(&b);
    if (x.have < size) {
        cli_error(cmd,
                  "%s: %s after %llu of %llu bytes (%d tries); run the command again to "
                  "resume from %s",
                  url, curl_easy_strerror(rc), (unsigned long long)x.have, (unsigned long long)size,
                  RETRIES, part);
        goto done;
    }
    char got[65];
    cli_sha256_hex(&x.sha, got);
    if (x.have != size || strcmp(got, sha) != 0) {
        remove(part); /* before the lock goes with the file */
        fclose(x.f);
        x.f = NULL;
        cli_error(cmd,
                  "%s: %llu bytes with SHA-256 %s, but the hub lists %llu bytes with SHA-256 "
                  "%s; the download was removed",
                  url, (unsigned long long)x.have, got, (unsigned long long)size, sha);
        goto done;
    }
    /* named and recorded while the lock is held: a cllm waiting for it
     * then finds the file in the cache */
    if (fsync(fileno(x.f)) != 0 || rename(part, dest) != 0) {
        cli_error(cmd, "cannot write %s: %s", dest, strerror(errno));
        goto done;
    }
    FILE *sf = fopen(side, "w");
    if (sf) { /* without it the next run checks the file again */
        fprintf(sf, "%s\n", sha);
        fclose(sf);
    }
    ok = true;
done:
    if (x.f) fclose(x.f);
    free(part);
    free(side);
    return ok;
}

/* ---- repositories and their files ---- */

/* "user/name": letters, digits, '-', '_', '.', one '/', no "..". */
static bool valid_repo(const char *r, size_t len) {
    int slashes = 0;
    for (size_t i = 0; i < len; i++) {
        const char ch = r[i];
        if (ch == '/') {
            if (i == 0 || i + 1 == len || r[i - 1] == '/') return false;
            slashes++;
        } else if (!isalnum((unsigned char)ch) && !strchr("-_.", ch)) {
            return false;
        }
        if (ch == '.' && i + 1 < len && r[i + 1] == '.') return false;
    }
    return slashes == 1 && len < 200;
}

/* A file name of the listing that is safe under the cache: no "..", no
 * empty or absolute part, printable ASCII without '\\'. */
static bool valid_file(const char *f) {
    if (!*f || *f == '/' || strlen(f) > 400) return false;
    for (const char *p = f; *p; p++) {
        if (*p < 0x21 || *p > 0x7e || *p == '\\') return false;
        if (*p == '/' && p[1] == '/') return false;
    }
    for (const char *p = f; p; p = strchr(p, '/')) {
        if (*p == '/') p++;
        if (!strncmp(p, "..", 2) && (p[2] == '/' || !p[2])) return false;
        if (!strncmp(p, ".", 1) && (p[1] == '/' || !p[1])) return false;
    }
    return f[strlen(f) - 1] != '/';
}

/* s percent-encoded for a URL path (keeping '/'). */
static char *url_path(const char *s) {
    char *out = malloc(strlen(s) * 3 + 1), *o = out;
    if (!out) return NULL;
    for (; *s; s++) {
        const unsigned char ch = (unsigned char)*s;
        if (isalnum(ch) || strchr("-_.~/", ch)) {
            *o++ = (char)ch;
        } else {
            o += sprintf(o, "%%%02X", ch);
        }
    }
    *o = '\0';
    return out;
}

static bool ends_with_ci(const char *s, const char *suffix) {
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcasecmp(s + n - m, suffix);
}

static bool contains_ci(const char *s, const char *needle) {
    const size_t m = strlen(needle);
    for (; *s; s++) {
        if (!strncasecmp(s, needle, m)) return true;
    }
    return !m;
}

/* A GGUF file of the listing: its name, size and SHA-256. */
typedef struct hub_file {
    const char *path; /* in the JSON */
    uint64_t size;
    const char *sha256;
} hub_file;

/* The model files (.gguf, not a projector "mmproj") of the listing `arr`
 * into files[0, *n) (the array allocated). False after printing. */
static bool list_gguf(const char *cmd, const char *repo, json_t *arr, hub_file **files, int *n) {
    *files = NULL, *n = 0;
    if (!json_is_array(arr)) {
        cli_error(cmd, "%s: the hub's listing is not a JSON array", repo);
        return false;
    }
    hub_file *v = calloc(json_array_size(arr) + 1, sizeof(*v));
    if (!v) {
        cli_error(cmd, "out of memory");
        return false;
    }
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) {
        const char *type = json_string_value(json_object_get(e, "type"));
        const char *path = json_string_value(json_object_get(e, "path"));
        if (!path || (type && strcmp(type, "file") != 0) || !ends_with_ci(path, ".gguf")) continue;
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        if (contains_ci(base, "mmproj")) continue;
        if (!valid_file(path)) {
            cli_error(cmd, "%s: the hub lists a file name cllm will not write: '%s'", repo, path);
            free(v);
            return false;
        }
        json_t *lfs = json_object_get(e, "lfs");
        const char *sha = json_string_value(json_object_get(lfs, "oid"));
        json_t *size = json_object_get(lfs, "size");
        if (!size) size = json_object_get(e, "size");
        bool hex = sha && strlen(sha) == 64;
        for (int k = 0; hex && k < 64; k++) hex = isxdigit((unsigned char)sha[k]) != 0;
        if (!hex || !json_is_integer(size) || json_integer_value(size) < 0) {
            cli_error(cmd, "%s: the hub lists %s without its SHA-256 and size (lfs.oid, size)",
                      repo, path);
            free(v);
            return false;
        }
        v[*n] = (hub_file){path, (uint64_t)json_integer_value(size), sha};
        (*n)++;
    }
    *files = v;
    return true;
}

static int cmp_file(const void *a, const void *b) {
    return strcmp(((const hub_file *)a)->path, ((const hub_file *)b)->path);
}

/* The file that `quant` names among files[0, n) (sorted): index, or -1. A
 * quant ending in .gguf is a file name (with or without its folder). */
static int pick(const hub_file *files, int n, const char *quant) {
    if (quant && ends_with_ci(quant, ".gguf")) {
        for (int i = 0; i < n; i++) {
            const char *base = strrchr(files[i].path, '/');
            if (!strcmp(files[i].path, quant) || (base && !strcmp(base + 1, quant))) return i;
        }
        return -1;
    }
    static const char *const k_default[] = {"Q4_K_M", "Q4_0", "Q8_0"};
    const int n_try = quant ? 1 : 3;
    for (int t = 0; t < n_try; t++) {
        const char *q = quant ? quant : k_default[t];
        for (int i = 0; i < n; i++) {
            int no, count;
            if (cli_split_name(files[i].path, &no, &count) && no != 1) continue;
            if (contains_ci(
                    strrchr(files[i].path, '/') ? strrchr(files[i].path, '/') : files[i].path, q)) {
                return i;
            }
        }
    }
    if (quant) return -1;
    for (int i = 0; i < n; i++) { /* the first whole file or first part */
        int no, count;
        if (!cli_split_name(files[i].path, &no, &count) || no == 1) return i;
    }
    return -1;
}

/* The parts of the split file whose first part is files[first]: indices in
 * idx[0, count) in order. False after printing a part that is missing. */
static bool split_parts(const char *cmd, const char *repo, const hub_file *files, int n, int first,
                        int count, int *idx) {
    const char *p0 = files[first].path;
    const size_t stem = strlen(p0) - strlen("-00001-of-00003.gguf");
    for (int k = 0; k < count; k++) {
        idx[k] = -1;
        for (int i = 0; i < n; i++) {
            int no, cnt;
            if (!strncmp(files[i].path, p0, stem) && strlen(files[i].path) == strlen(p0) &&
                cli_split_name(files[i].path, &no, &cnt) && cnt == count && no == k + 1) {
                idx[k] = i;
            }
        }
        if (idx[k] < 0) {
            cli_error(cmd, "%s: %s is split in %d files, but the hub lists no part %d", repo, p0,
                      count, k + 1);
            return false;
        }
    }
    return true;
}

static void print_choices(const char *cmd, const char *repo, const hub_file *files, int n) {
    if (n == 0) {
        cli_error(cmd, "%s holds no GGUF file", repo);
        return;
    }
    fprintf(stderr, "cllm %s: the GGUF files of %s:\n", cmd, repo);
    for (int i = 0; i < n; i++) {
        int no, count;
        if (cli_split_name(files[i].path, &no, &count) && no != 1) continue;
        fprintf(stderr, "  ");
        cllm_escape_fputs(stderr, files[i].path, strlen(files[i].path), CLLM_ESCAPE_TEXT);
        fputc('\n', stderr);
    }
}

bool cli_hf_pull(const char *cmd, const char *spec, bool keep_parts, char ***paths_out,
                 int *n_out) {
    const char *colon = strchr(spec, ':');
    const size_t repo_len = colon ? (size_t)(colon - spec) : strlen(spec);
    const char *quant = colon ? colon + 1 : NULL;
    if (!valid_repo(spec, repo_len) || (quant && (!*quant || strchr(quant, ':')))) {
        cli_error(cmd,
                  "'%s' is not a model of the hub: USER/NAME or USER/NAME:QUANT (Q4_K_M, a "
                  "file name, ...)",
                  spec);
        return false;
    }
    char *repo = strndup(spec, repo_len), *cache = cli_cache_dir(cmd), *url = NULL;
    char **paths = NULL;
    int n_paths = 0;
    hub h = {0};
    json_t *root = NULL;
    hub_file *files = NULL;
    int n_files = 0, *idx = NULL;
    char *joined = NULL; /* the name of a split file's parts joined */
    bool ok = false;
    if (!repo || !cache) {
        if (!repo) cli_error(cmd, "out of memory");
        goto done;
    }
    if (!hub_init(cmd, &h)) goto done;
    /* the repository's files, with their sizes and SHA-256 (lfs.oid) */
    if (!(url = str_printf("%s/api/models/%s/tree/main?recursive=true", h.endpoint, repo))) {
        cli_error(cmd, "out of memory");
        goto done;
    }
    char *body = http_get(cmd, &h, url);
    if (!body) goto done;
    json_error_t jerr;
    root = json_loads(body, 0, &jerr);
    free(body);
    if (!root) {
        cli_error(cmd, "%s: not JSON (%s, line %d)", url, jerr.text, jerr.line);
        goto done;
    }
    if (!list_gguf(cmd, repo, root, &files, &n_files)) goto done;
    qsort(files, (size_t)n_files, sizeof(*files), cmp_file);
    const int first = pick(files, n_files, quant);
    if (first < 0) {
        if (quant) cli_error(cmd, "%s holds no GGUF file that matches '%s'", repo, quant);
        print_choices(cmd, repo, files, n_files);
        goto done;
    }
    int no = 1, count = 1;
    if (!cli_split_name(files[first].path, &no, &count)) count = 1;
    if (!(idx = calloc((size_t)count, sizeof(*idx))) ||
        !(paths = calloc((size_t)count, sizeof(*paths)))) {
        cli_error(cmd, "out of memory");
        goto done;
    }
    if (count == 1) {
        idx[0] = first;
    } else if (!split_parts(cmd, repo, files, n_files, first, count, idx)) {
        goto done;
    }
    struct stat jst;
    if (count > 1) { /* joined before: the parts may be gone */
        char *p0 = str_printf("%s/models/hf/%s/%s", cache, repo, files[first].path);
        joined = p0 ? cli_split_joined_name(p0) : NULL;
        free(p0);
        if (!joined) {
            cli_error(cmd, "out of memory");
            goto done;
        }
        if (stat(joined, &jst) == 0 && S_ISREG(jst.st_mode)) {
            paths[0] = joined, joined = NULL;
            n_paths = 1;
            ok = true;
            goto done;
        }
    }
    for (int k = 0; k < count; k++) {
        const hub_file *f = &files[idx[k]];
        char *enc = url_path(f->path), sha[65];
        for (int j = 0; j < 64; j++) sha[j] = (char)tolower((unsigned char)f->sha256[j]);
        sha[64] = '\0';
        free(url);
        url = enc ? str_printf("%s/%s/resolve/main/%s", h.endpoint, repo, enc) : NULL;
        paths[k] = str_printf("%s/models/hf/%s/%s", cache, repo, f->path);
        free(enc);
        if (!url || !paths[k]) {
            cli_error(cmd, "out of memory");
            goto done;
        }
        n_paths = k + 1;
        const char *base = strrchr(f->path, '/') ? strrchr(f->path, '/') + 1 : f->path;
        if (!fetch_file(cmd, &h, url, paths[k], base, sha, f->size)) goto done;
    }
    if (count > 1) {
        if (!cli_gguf_join(cmd, paths[0], joined, keep_parts)) goto done;
        for (int k = 0; k < n_paths; k++) {
            if (!keep_parts) { /* the parts' records of their SHA-256 */
                char *side = str_printf("%s.sha256", paths[k]);
                if (side) remove(side);
                free(side);
            }
            free(paths[k]);
        }
        paths[0] = joined, joined = NULL;
        n_paths = 1;
    }
    ok = true;
done:
    if (!ok) {
        for (int k = 0; k < n_paths; k++) free(paths[k]);
        free(paths);
    } else {
        *paths_out = paths;
        *n_out = n_paths;
    }
    free(idx);
    free(joined);
    free(files);
    json_decref(root);
    hub_free(&h);
    free(url);
    free(cache);
    free(repo);
    return ok;
}

#endif /* CLLM_HAVE_PULL */
