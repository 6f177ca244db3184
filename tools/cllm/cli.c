/* What the commands share: messages, option values, texts from files. */
#include "cllm.h"
#include "commands.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- messages ---------------------------------------------------------- */

static const char *const k_level_names[CLLM_LOG_COUNT] = {"debug", "info", "warning", "error"};

/* "cllm NAME: WHAT" and `msg` escaped, as one write: under mpirun every
 * rank's stderr meets in one stream, and a line written piece by piece
 * interleaves with another rank's. */
static void put_line(const char *name, const char *what, const char *msg) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f) {
        fprintf(f, "cllm %s: %s", name, what);
        cllm_escape_fputs(f, msg, strlen(msg), CLLM_ESCAPE_TEXT);
        fputc('\n', f);
    }
    if (f && fclose(f) == 0) {
        fwrite(text, 1, len, stderr);
    } else { /* no memory for the line: piece by piece */
        fprintf(stderr, "cllm %s: %s", name, what);
        cllm_escape_fputs(stderr, msg, strlen(msg), CLLM_ESCAPE_TEXT);
        fputc('\n', stderr);
    }
    free(text);
}

/* The library's messages: errors are left to the command, which prints
 * cllm_last_error() once when the call fails; the other levels as the
 * default logger prints them. */
static void cli_log(cllm_log_level level, const char *msg, void *ud) {
    (void)ud;
    if (level >= CLLM_LOG_ERROR || level < cllm_log_get_level()) return;
    put_line(k_level_names[level], "", msg);
}

void cli_init_log(void) { cllm_log_set(cli_log, NULL); }

static void say(const char *cmd, const char *what, const char *fmt, va_list ap) {
    char msg[2048];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    put_line(cmd, what, msg);
}

void cli_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    say(cmd, "", fmt, ap);
    va_end(ap);
}

void cli_warn(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    say(cmd, "warning: ", fmt, ap);
    va_end(ap);
}

void cli_lib_error(const char *cmd) {
    const char *msg = cllm_last_error();
    /* the library names its area ("plan: ..."): once, not after "cllm plan: " */
    const size_t n = strlen(cmd);
    if (!strncmp(msg, cmd, n) && msg[n] == ':' && msg[n + 1] == ' ') msg += n + 2;
    cli_error(cmd, "%s", *msg ? msg : "failed (no message)");
}

/* ---- load progress ---------------------------------------------------- */

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void load_bar(uint64_t done, uint64_t total, void *ud) {
    cli_load_bar *b = ud;
    const double t = mono_s();
    if (done < total && (t - b->t0 < 1.0 || t - b->last < 0.1)) return;
    if (done >= total && !b->drawn) return; /* a load under a second: no bar */
    const int width = 40, fill = total ? (int)((double)done / (double)total * width) : width;
    fprintf(stderr, "\rloading [%.*s%*s] %3d%% %.1f s", fill,
            "========================================", width - fill, "",
            total ? (int)(100.0 * (double)done / (double)total) : 100, t - b->t0);
    if (done >= total) fputc('\n', stderr);
    b->drawn = true;
    b->last = t;
}

void cli_load_progress(cllm_model_params *mp, cli_load_bar *bar) {
    memset(bar, 0, sizeof(*bar));
    if (!isatty(2)) return; /* the library draws nothing either */
    bar->t0 = mono_s();
    mp->progress_fn = load_bar;
    mp->progress_user_data = bar;
}

void cli_json_str(FILE *f, const char *s, size_t len) {
    fputc('"', f);
    cllm_escape_fputs(f, s, len, CLLM_ESCAPE_JSON);
    fputc('"', f);
}

/* ---- options ----------------------------------------------------------- */

bool cli_is_help(const char *arg) { return !strcmp(arg, "-h") || !strcmp(arg, "--help"); }

bool cli_is_one_of(const char *arg, const char *words) {
    const size_t n = strlen(arg);
    for (const char *w = words; *w;) {
        const size_t k = strcspn(w, " ");
        if (k == n && n > 0 && !strncmp(w, arg, n)) return true;
        w += k;
        w += strspn(w, " ");
    }
    return false;
}

const char *cli_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_error(cmd, "option '%s' needs a value (see cllm %s --help)", argv[*i], cmd);
        return NULL;
    }
    return argv[++*i];
}

bool cli_int(const char *cmd, const char *opt, const char *v, long long min, long long max,
             long long *out) {
    char *end;
    errno = 0;
    const long long x = strtoll(v, &end, 10);
    if (end == v || *end) {
        cli_error(cmd, "%s: '%s' is not a whole number", opt, v);
        return false;
    }
    if (errno == ERANGE || x < min || x > max) {
        cli_error(cmd, "%s: %s is out of range (%lld to %lld)", opt, v, min, max);
        return false;
    }
    *out = x;
    return true;
}

int cli_kv_option(const char *cmd, const char *opt, int argc, char **argv, int *i, cllm_type *k,
                  cllm_type *v) {
    if (!cli_is_one_of(opt, CLI_KV_OPTIONS)) return 0;
    const char *val = cli_value(cmd, argc, argv, i);
    if (!val) return 2;
    static const struct {
        const char *name;
        cllm_type type;
    } types[] = {{"f16", CLLM_TYPE_F16},
                 {"f32", CLLM_TYPE_F32},
                 {"bf16", CLLM_TYPE_BF16},
                 {"q8_0", CLLM_TYPE_Q8_0},
                 {"q4_0", CLLM_TYPE_Q4_0}};
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        if (strcmp(val, types[t].name) != 0) continue;
        const bool is_k = !strcmp(opt, "--cache-type-k") || !strcmp(opt, "-ctk");
        const bool is_v = !strcmp(opt, "--cache-type-v") || !strcmp(opt, "-ctv");
        if (!is_v) *k = types[t].type;
        if (!is_k) *v = types[t].type;
        return 1;
    }
    cli_error(cmd, "%s: '%s' is not a KV cache type (f16, f32, bf16, q8_0 or q4_0)", opt, val);
    return 2;
}

bool cli_float(const char *cmd, const char *opt, const char *v, float *out) {
    char *end;
    errno = 0;
    const double x = strtod(v, &end);
    if (end == v || *end || isnan(x)) {
        cli_error(cmd, "%s: '%s' is not a number", opt, v);
        return false;
    }
    if (isinf(x) && errno != ERANGE) {
        cli_error(cmd, "%s: %s is out of range: a finite number is needed", opt, v);
        return false;
    }
    /* ERANGE: past the largest double, or nearer 0 than the smallest */
    if ((errno == ERANGE && fabs(x) >= 1.0) || fabs(x) > FLT_MAX) {
        cli_error(cmd, "%s: %s is out of range: too large (at most %g)", opt, v, (double)FLT_MAX);
        return false;
    }
    if ((errno == ERANGE && fabs(x) < 1.0) || (x != 0.0 && fabs(x) < FLT_MIN)) {
        cli_error(cmd, "%s: %s is out of range: too close to 0 (0, or at least %g)", opt, v,
                  (double)FLT_MIN);
        return false;
    }
    *out = (float)x;
    return true;
}

/* ---- texts ------------------------------------------------------------- */

bool cli_read_text(const char *cmd, const char *path, char **out, size_t *len) {
    const bool std_in = !strcmp(path, "-");
    FILE *f = std_in ? stdin : fopen(path, "rb");
    if (!f) {
        cli_error(cmd, "%s: %s", path, strerror(errno));
        return false;
    }
    size_t n = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    bool ok = buf != NULL;
    while (ok) {
        if (n + 1 == cap) {
            if (n > CLI_MAX_TEXT) break; /* refused below */
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                cli_error(cmd, "%s: out of memory after %zu bytes", path, n);
                ok = false;
                break;
            }
            buf = nb, cap *= 2;
        }
        const size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    if (!buf) cli_error(cmd, "%s: out of memory", path);
    if (ok && n > CLI_MAX_TEXT) {
        cli_error(cmd, "%s: longer than %zu bytes", path, (size_t)CLI_MAX_TEXT);
        ok = false;
    }
    if (ok && ferror(f)) {
        cli_error(cmd, "%s: read error: %s", path, strerror(errno));
        ok = false;
    }
    if (!std_in) fclose(f);
    if (!ok) {
        free(buf);
        return false;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return true;
}
