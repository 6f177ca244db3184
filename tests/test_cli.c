/*
 * The cllm command (the executable is argv[1]) end to end, each case a real
 * run with its standard output and error captured:
 *
 *  - an error of the library is printed once, on one line, by every command;
 *  - strings of crafted files (architecture, keys, values, the rope scaling
 *    type, the file's own name) holding ESC sequences, newlines and invalid
 *    UTF-8 reach neither output raw: no control byte but the newlines the
 *    command writes, only valid UTF-8; --json output is valid JSON;
 *  - every numeric option refuses overflow, NaN and infinities, naming the
 *    cause;
 *  - -h / --help print each command's usage and exit 0; an option without
 *    its value says so;
 *  - prompts from -f FILE and -f - (longer than a command line may be) give
 *    what -p gives, and a context above the trained one gets a warning.
 *
 * The crafted files are written here with the GGUF writer; the cases that
 * need stories260K are skipped without it.
 */
#include "common/check.h"
#include "common/refs.h"
#include "gguf/gguf.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ESC sequences (clear screen, set the title), a forged log line after a
 * newline, a carriage return, bytes that are not UTF-8, a C1 CSI. */
#define HOSTILE                                                                                    \
    "ll\x1b[2J\x1b]0;pwned\x07\ncllm error: forged\r\xff\xfe\xc2\x9b"                              \
    "1m"

static const char *g_cllm;
static char g_dir[64];

/* ---- running the command ------------------------------------------------ */

/* s single-quoted for sh (any bytes but NUL); a ring of buffers. */
static const char *q(const char *s) {
    static char ring[8][8192];
    static int next;
    char *b = ring[next++ % 8];
    size_t n = 0;
    b[n++] = '\'';
    for (; *s && n < sizeof(ring[0]) - 8; s++) {
        if (*s == '\'') {
            memcpy(b + n, "'\\''", 4);
            n += 4;
        } else {
            b[n++] = *s;
        }
    }
    b[n++] = '\'';
    b[n] = '\0';
    return b;
}

typedef struct cli_out {
    int rc;
    char *out, *err; /* NUL-terminated */
    size_t out_len, err_len;
} cli_out;

static void cli_free(cli_out *o) {
    free(o->out);
    free(o->err);
    memset(o, 0, sizeof(*o));
}

/* Runs `cllm ARGS` (ARGS: words for sh, file names through q()) with
 * standard input from `in` (NULL: /dev/null). */
static cli_out cli(const char *in, const char *fmt, ...) {
    char args[16384], cmd[24576], out_path[128], err_path[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    snprintf(out_path, sizeof(out_path), "%s/stdout", g_dir);
    snprintf(err_path, sizeof(err_path), "%s/stderr", g_dir);
    snprintf(cmd, sizeof(cmd), "%s %s <%s >%s 2>%s", q(g_cllm), args, in ? q(in) : "/dev/null",
             out_path, err_path);
    cli_out o = {0};
    const int st = system(cmd);
    o.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    o.out = refs_read_file(out_path, &o.out_len);
    o.err = refs_read_file(err_path, &o.err_len);
    if (!o.out) o.out = calloc(1, 1);
    if (!o.err) o.err = calloc(1, 1);
    return o;
}

/* s escaped for the messages of failed checks (a ring of buffers): the
 * output of a failed case must not repaint the terminal either. */
static const char *show(const char *s) {
    static char ring[4][4096];
    static int next;
    char *b = ring[next++ % 4];
    cllm_escape(b, sizeof(ring[0]), s, strlen(s), CLLM_ESCAPE_TEXT);
    return b;
}

static size_t count_lines(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

/* One line, ending in a newline. */
static bool one_line(const char *s, size_t n) {
    return n > 0 && s[n - 1] == '\n' && count_lines(s, n) == 1;
}

/* ---- what a terminal may be shown --------------------------------------- */

/* The code point of the well-formed UTF-8 sequence at s (its length in *k),
 * or -1. */
static long utf8_at(const unsigned char *s, size_t n, size_t *k) {
    const unsigned c = s[0];
    *k = c < 0x80             ? 1
         : (c & 0xe0) == 0xc0 ? 2
         : (c & 0xf0) == 0xe0 ? 3
         : (c & 0xf8) == 0xf0 ? 4
                              : 0;
    if (*k == 0 || *k > n) return -1;
    long v = *k == 1 ? (long)c : (long)(c & (0x7f >> *k));
    for (size_t j = 1; j < *k; j++) {
        if ((s[j] & 0xc0) != 0x80) return -1;
        v = v << 6 | (s[j] & 0x3f);
    }
    static const long k_min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < k_min[*k] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return -1;
    return v;
}

/* Nothing but printable text and newlines: valid UTF-8, no C0 control other
 * than '\n', no DEL, no C1 control, no bidirectional control. */
static bool clean(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < n;) {
        size_t k;
        const long v = utf8_at(s + i, n - i, &k);
        if (v < 0 || (v < 0x20 && v != '\n') || (v >= 0x7f && v <= 0x9f)) return false;
        if ((v >= 0x2028 && v <= 0x202e) || (v >= 0x2066 && v <= 0x2069)) return false;
        i += k;
    }
    return true;
}

/* ---- a JSON checker (RFC 8259; strings must be valid UTF-8) ------------- */

typedef struct json_in {
    const unsigned char *p, *end;
    int depth;
} json_in;

static bool json_value(json_in *j);

static void json_ws(json_in *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) {
        j->p++;
    }
}

static bool json_lit(json_in *j, const char *lit) {
    const size_t n = strlen(lit);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n) != 0) return false;
    j->p += n;
    return true;
}

static bool is_hex(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool json_string(json_in *j) {
    if (j->p >= j->end || *j->p != '"') return false;
    j->p++;
    while (j->p < j->end && *j->p != '"') {
        if (*j->p < 0x20) return false;
        if (*j->p == '\\') {
            if (j->end - j->p < 2) return false;
            const unsigned char e = j->p[1];
            if (e == 'u') {
                if (j->end - j->p < 6) return false;
                for (int i = 2; i < 6; i++) {
                    if (!is_hex(j->p[i])) return false;
                }
                j->p += 6;
            } else if (strchr("\"\\/bfnrt", e) && e) {
                j->p += 2;
            } else {
                return false;
            }
            continue;
        }
        size_t k;
        if (utf8_at(j->p, (size_t)(j->end - j->p), &k) < 0) return false;
        j->p += k;
    }
    if (j->p >= j->end) return false;
    j->p++;
    return true;
}

static bool json_number(json_in *j) {
    const unsigned char *start = j->p;
    if (j->p < j->end && *j->p == '-') j->p++;
    if (j->p >= j->end) return false;
    if (*j->p == '0') {
        j->p++;
    } else if (*j->p >= '1' && *j->p <= '9') {
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    } else {
        return false;
    }
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        const unsigned char *d = j->p;
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
        if (j->p == d) return false;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
        const unsigned char *d = j->p;
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
        if (j->p == d) return false;
    }
    return j->p > start;
}

static bool json_items(json_in *j, unsigned char close, bool object) {
    j->p++;
    json_ws(j);
    if (j->p < j->end && *j->p == close) {
        j->p++;
        return true;
    }
    for (;;) {
        if (object) {
            json_ws(j);
            if (!json_string(j)) return false;
            json_ws(j);
            if (j->p >= j->end || *j->p != ':') return false;
            j->p++;
        }
        if (!json_value(j)) return false;
        json_ws(j);
        if (j->p >= j->end) return false;
        if (*j->p == close) {
            j->p++;
            return true;
        }
        if (*j->p != ',') return false;
        j->p++;
    }
}

static bool json_value(json_in *j) {
    json_ws(j);
    if (j->p >= j->end || ++j->depth > 64) return false;
    bool ok;
    switch (*j->p) {
    case '{': ok = json_items(j, '}', true); break;
    case '[': ok = json_items(j, ']', false); break;
    case '"': ok = json_string(j); break;
    case 't': ok = json_lit(j, "true"); break;
    case 'f': ok = json_lit(j, "false"); break;
    case 'n': ok = json_lit(j, "null"); break;
    default: ok = json_number(j); break;
    }
    j->depth--;
    return ok;
}

/* One JSON value and nothing but white space after it. */
static bool json_valid(const char *s, size_t n) {
    json_in j = {(const unsigned char *)s, (const unsigned char *)s + n, 0};
    if (!json_value(&j)) return false;
    json_ws(&j);
    return j.p == j.end;
}

static void check_json_checker(void) {
    static const char *const good[] = {"{}", "[1, -2.5e3, true, null]", "{\"a\": \"\\u001b\\n\"}",
                                       "\"\xc3\xa9\""};
    static const char *const bad[] = {"{",        "{\"a\" 1}",     "\"\x1b\"", "\"\xff\"",
                                      "[1,]",     "\"\\x1b\"",     "01",       "{} x",
                                      "\"a\nb\"", "[\"\xc0\xaf\"]"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        CHECKF(json_valid(good[i], strlen(good[i])), "valid JSON refused: %s", good[i]);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECKF(!json_valid(bad[i], strlen(bad[i])), "invalid JSON passed: %s", bad[i]);
    }
}

/* ---- crafted files ------------------------------------------------------ */

/* A file of metadata only, its strings hostile: the architecture (unknown,
 * so every loader refuses it, quoting it), a key, values (one with a NUL),
 * the tokenizer's model and pre-tokenizer. */
static bool write_hostile_meta(const char *path) {
    cllm_gguf_writer *w = cllm_gguf_writer_new();
    if (!w) return false;
    static const char k_val_nul[] = "a\0b\x1b[31m";
    bool ok =
        cllm_gguf_writer_set_str(w, "general.architecture", HOSTILE) == CLLM_OK &&
        cllm_gguf_writer_set_str(w, "general.name", HOSTILE) == CLLM_OK &&
        cllm_gguf_writer_set_str(w, "evil.key\x1b]0;title\x07\n.x\xff", HOSTILE) == CLLM_OK &&
        cllm_gguf_writer_set_str_n(w, "with.nul", k_val_nul, sizeof(k_val_nul) - 1) == CLLM_OK &&
        cllm_gguf_writer_set_str(w, "tokenizer.ggml.model", HOSTILE) == CLLM_OK &&
        cllm_gguf_writer_set_str(w, "tokenizer.ggml.pre", HOSTILE) == CLLM_OK &&
        cllm_gguf_writer_write(w, path) == CLLM_OK;
    cllm_gguf_writer_free(w);
    return ok;
}

/* A copy of the model at `src` (every key and tensor) with one string key
 * set (when key_s) and one integer key set (when key_i). */
static bool write_model_copy(const char *src, const char *dst, const char *key_s, const char *val_s,
                             const char *key_i, uint32_t val_i) {
    size_t size = 0;
    char *bytes = refs_read_file(src, &size);
    cllm_gguf *g = NULL;
    cllm_gguf_writer *w = cllm_gguf_writer_new();
    bool ok = bytes && w && cllm_gguf_open(src, &g) == CLLM_OK &&
              cllm_gguf_writer_copy_kv(w, g) == CLLM_OK;
    if (ok && key_s) ok = cllm_gguf_writer_set_str(w, key_s, val_s) == CLLM_OK;
    if (ok && key_i) ok = cllm_gguf_writer_set_u32(w, key_i, val_i) == CLLM_OK;
    for (int64_t i = 0; ok && i < cllm_gguf_n_tensors(g); i++) {
        const cllm_gguf_tensor_info *t = cllm_gguf_tensor(g, i);
        const uint64_t at = cllm_gguf_data_offset(g) + t->offset;
        ok = at + t->size <= size && cllm_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims,
                                                                 t->ne, bytes + at) == CLLM_OK;
    }
    ok = ok && cllm_gguf_writer_write(w, dst) == CLLM_OK;
    cllm_gguf_writer_free(w);
    cllm_gguf_free(g);
    free(bytes);
    return ok;
}

static bool write_text(const char *path, const char *s, size_t n) {
    FILE *f = fopen(path, "wb");
    const bool ok = f && fwrite(s, 1, n, f) == n;
    if (f) fclose(f);
    return ok;
}

/* ---- the cases ---------------------------------------------------------- */

/* Output of a command that failed on a hostile file: one clean line on
 * stderr that shows the file's string escaped. */
#define CHECK_HOSTILE_ERROR(o, what)                                                               \
    CHECKF((o).rc == 1 && one_line((o).err, (o).err_len) && clean((o).err, (o).err_len) &&         \
               strstr((o).err, "\\x1b") != NULL,                                                   \
           "%s: rc %d, stderr '%s'", what, (o).rc, show((o).err))

static void check_errors_once(const char *meta) {
    /* every command, a file that does not exist and a file it refuses */
    static const char *const cmds[] = {"run -p hi",       "info",       "plan", "bench",
                                       "perplexity -f -", "embed -p hi"};
    char missing[128];
    snprintf(missing, sizeof(missing), "%s/no-such-file.gguf", g_dir);
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        cli_out o = cli(NULL, "%s -m %s", cmds[i], q(missing));
        CHECKF(o.rc == 1 && one_line(o.err, o.err_len) && strstr(o.err, "no-such-file.gguf"),
               "%s: rc %d, stderr '%s'", cmds[i], o.rc, show(o.err));
        cli_free(&o);
        if (strcmp(cmds[i], "info") == 0) continue; /* info prints any GGUF file */
        o = cli(NULL, "%s -m %s", cmds[i], q(meta));
        CHECK_HOSTILE_ERROR(o, cmds[i]);
        cli_free(&o);
    }
}

static void check_hostile_meta(const char *meta) {
    cli_out o = cli(NULL, "info -m %s", q(meta));
    CHECKF(o.rc == 0 && o.err_len == 0, "info: rc %d, stderr '%s'", o.rc, show(o.err));
    CHECKF(clean(o.out, o.out_len), "info printed control bytes or invalid UTF-8:\n%s",
           show(o.out));
    /* the strings are there, escaped; no line starts with the forged text */
    CHECK(strstr(o.out, "ll\\x1b[2J\\x1b]0;pwned\\x07\\ncllm error: forged\\r\\xff\\xfe\\u009b") !=
          NULL);
    CHECK(strstr(o.out, "evil.key\\x1b]0;title\\x07\\n.x\\xff") != NULL);
    CHECK(strstr(o.out, "\"a\\x00b\\x1b[31m\"") != NULL);
    CHECK(strstr(o.out, "\ncllm error: forged") == NULL);
    cli_free(&o);
}

static void check_hostile_model(const char *model) {
    /* the rope scaling type, quoted by the loader's error */
    char path[128];
    snprintf(path, sizeof(path), "%s/scaling.gguf", g_dir);
    CHECK(write_model_copy(model, path, "llama.rope.scaling.type", HOSTILE, NULL, 0));
    cli_out o = cli(NULL, "run -m %s -p hi", q(path));
    CHECK_HOSTILE_ERROR(o, "run, rope scaling");
    cli_free(&o);
    o = cli(NULL, "plan -m %s", q(path));
    CHECK_HOSTILE_ERROR(o, "plan, rope scaling");
    cli_free(&o);
    /* the tokenizer's model name, quoted when refused */
    CHECK(write_model_copy(model, path, "tokenizer.ggml.model", HOSTILE, NULL, 0));
    o = cli(NULL, "run -m %s -p hi", q(path));
    CHECK_HOSTILE_ERROR(o, "run, tokenizer model");
    cli_free(&o);

    /* a model whose own name is hostile, with a token id out of range: the
     * loader's warning quotes the name */
    char name[256];
    snprintf(name, sizeof(name), "%s/m\x1b[31m\n\xff\xfe.gguf", g_dir);
    CHECK(write_model_copy(model, name, NULL, NULL, "tokenizer.ggml.padding_token_id", 100000));
    o = cli(NULL, "run -m %s -p Once -n 2 --temp 0", q(name));
    CHECKF(o.rc == 0 && clean(o.err, o.err_len) && strstr(o.err, "m\\x1b[31m\\n\\xff\\xfe.gguf") &&
               strstr(o.err, "cllm warning: "),
           "run: rc %d, stderr '%s'", o.rc, show(o.err));
    cli_free(&o);
    static const char *const json_cmds[] = {"plan --json", "plan --json --verbose",
                                            "run -p Once -n 4 --temp 0 --json",
                                            "bench -p 8 -n 4 -r 1 -t 1 -o json"};
    for (size_t i = 0; i < sizeof(json_cmds) / sizeof(json_cmds[0]); i++) {
        o = cli(NULL, "%s -m %s", json_cmds[i], q(name));
        CHECKF(o.rc == 0 && json_valid(o.out, o.out_len) && clean(o.err, o.err_len),
               "%s: rc %d, not JSON: '%s' (stderr '%s')", json_cmds[i], o.rc, show(o.out),
               show(o.err));
        cli_free(&o);
    }
    static const char *const text_cmds[] = {"plan --verbose", "info", "bench -p 8 -n 4 -r 1 -t 1",
                                            "bench -p 8 -n 4 -r 1 -t 1 -o csv"};
    for (size_t i = 0; i < sizeof(text_cmds) / sizeof(text_cmds[0]); i++) {
        o = cli(NULL, "%s -m %s", text_cmds[i], q(name));
        CHECKF(o.rc == 0 && clean(o.out, o.out_len) && clean(o.err, o.err_len) &&
                   strstr(o.out, "\\x1b[31m"),
               "%s: rc %d, stdout '%s' stderr '%s'", text_cmds[i], o.rc, show(o.out), show(o.err));
        cli_free(&o);
    }
    o = cli(NULL, "devices --json");
    CHECKF(o.rc == 0 && json_valid(o.out, o.out_len), "devices --json: '%s'", show(o.out));
    cli_free(&o);
}

/* Every numeric option of every command: overflow, NaN, infinities and
 * values too large for their type are refused, naming the option and why. */
static void check_numbers(const char *meta) {
    typedef struct num_case {
        const char *cmd, *opt, *value, *why;
    } num_case;
    static const char k_huge[] = "99999999999999999999";
    static const num_case cases[] = {
        {"run -p hi", "-n", k_huge, "out of range"},
        {"run -p hi", "-c", k_huge, "out of range"},
        {"run -p hi", "-c", "-1", "out of range"},
        {"run -p hi", "-b", k_huge, "out of range"},
        {"run -p hi", "-t", k_huge, "out of range"},
        {"run -p hi", "--top-k", k_huge, "out of range"},
        {"run -p hi", "--seed", k_huge, "out of range"},
        {"run -p hi", "-n", "12abc", "not a whole number"},
        {"run -p hi", "--ctx-size", k_huge, "out of range"},
        {"run -p hi", "--threads", k_huge, "out of range"},
        {"run -p hi", "--n-predict", "12abc", "not a whole number"},
        {"run -p hi", "-s", k_huge, "out of range"},
        {"run -p hi", "--repeat-last-n", "-1", "out of range"},
        {"chat", "--batch-size", k_huge, "out of range"},
        {"run -p hi", "--temp", "1e39", "too large"},
        {"run -p hi", "--temp", "-1e39", "too large"},
        {"run -p hi", "--temp", "1e999", "too large"},
        {"run -p hi", "--temp", "inf", "finite"},
        {"run -p hi", "--temp", "nan", "not a number"},
        {"run -p hi", "--temp", "1e-999", "too close to 0"},
        {"run -p hi", "--top-p", "1e39", "too large"},
        {"run -p hi", "--top-p", "nan", "not a number"},
        {"run -p hi", "--min-p", "-inf", "finite"},
        {"run -p hi", "--min-p", "1e39", "too large"},
        {"run -p hi", "--repeat-penalty", "1e39", "too large"},
        {"run -p hi", "--repeat-penalty", "0.5x", "not a number"},
        {"plan", "-c", k_huge, "out of range"},
        {"plan", "-b", k_huge, "out of range"},
        {"plan", "-t", k_huge, "out of range"},
        {"plan", "--sessions", k_huge, "out of range"},
        {"bench", "-p", k_huge, "out of range"},
        {"bench", "-n", k_huge, "out of range"},
        {"bench", "-b", k_huge, "out of range"},
        {"bench", "-c", k_huge, "out of range"},
        {"bench", "-r", k_huge, "out of range"},
        {"bench", "-t", "1,99999999999999999999", "out of range"},
        {"bench", "-t", "1,x", "not a whole number"},
        {"perplexity -f -", "-c", k_huge, "out of range"},
        {"perplexity -f -", "-b", k_huge, "out of range"},
        {"perplexity -f -", "-t", k_huge, "out of range"},
        {"perplexity -f -", "--chunks", k_huge, "out of range"},
        {"perplexity -f -", "--chunks", "0", "nothing to score"},
        {"embed -p hi", "-c", k_huge, "out of range"},
        {"embed -p hi", "--embd-normalize", k_huge, "out of range"},
        {"embed -p hi", "--pooling", "max", "one of none, mean, cls, last"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const num_case *c = &cases[i];
        cli_out o = cli(NULL, "%s -m %s %s %s", c->cmd, q(meta), c->opt, q(c->value));
        CHECKF(o.rc == 2 && one_line(o.err, o.err_len) && strstr(o.err, c->opt) &&
                   strstr(o.err, c->why) && !strstr(o.err, "got inf"),
               "%s %s %s: rc %d, stderr '%s' (want '%s')", c->cmd, c->opt, c->value, o.rc,
               show(o.err), c->why);
        cli_free(&o);
    }
}

/* On a model that loads, --temp 1e39 was once taken as inf and refused by
 * the sampler as "got inf": the command names the cause itself. */
static void check_temp_on_model(const char *model) {
    cli_out o = cli(NULL, "run -m %s -p Once -n 1 --temp 1e39", q(model));
    CHECKF(o.rc == 2 && one_line(o.err, o.err_len) &&
               strstr(o.err, "--temp: 1e39 is out of range") && strstr(o.err, "too large") &&
               !strstr(o.err, "inf"),
           "--temp 1e39: rc %d, stderr '%s'", o.rc, show(o.err));
    cli_free(&o);
}

/* cllm embed: a vector per text (normalized), per token with --pooling
 * none, and the OpenAI-style list with --json. */
static void check_embed(const char *model) {
    cli_out o = cli(NULL, "embed -m %s -p 'Once upon a time' -p 'The end'", q(model));
    int lines = 0;
    for (size_t i = 0; i < o.out_len; i++) lines += o.out[i] == '\n';
    double norm = 0;
    for (char *p = o.out, *end; p && *p && *p != '\n'; p = end) {
        const double v = strtod(p, &end);
        if (end == p) break;
        norm += v * v;
    }
    CHECKF(o.rc == 0 && lines == 2 && fabs(norm - 1.0) < 1e-3, "embed: rc %d, %d lines, norm %g",
           o.rc, lines, norm);
    cli_free(&o);
    o = cli(NULL, "embed -m %s -p 'Once upon a time' --json --pooling last", q(model));
    CHECKF(o.rc == 0 && json_valid(o.out, o.out_len) && strstr(o.out, "\"pooling\":\"last\""),
           "embed --json: rc %d, '%.80s'", o.rc, show(o.out));
    cli_free(&o);
    o = cli(NULL, "embed -m %s -p 'Once upon a time' --pooling none -c 2", q(model));
    CHECKF(o.rc == 1 && one_line(o.err, o.err_len) && strstr(o.err, "does not fit"),
           "embed -c 2: rc %d, '%s'", o.rc, show(o.err));
    cli_free(&o);
}

/* llama.cpp's and Ollama's habits: its option names, the positional form
 * `run FILE PROMPT`, -n until the end by default, -ngl and bench's -s
 * refused with what to use instead, one prefix per message. */
static void check_llama_habits(const char *model) {
    cli_out a = cli(NULL, "run -m %s -p Once -n 6 --temp 0", q(model));
    cli_out b =
        cli(NULL, "run %s Once --n-predict 6 --ctx-size 128 --threads 1 -s 7 --temp 0", q(model));
    CHECKF(a.rc == 0 && b.rc == 0 && a.out_len > 0 && !strcmp(a.out, b.out),
           "positional form and long names: rc %d/%d, '%s' vs '%s'", a.rc, b.rc, show(a.out),
           show(b.out));
    cli_free(&a);
    cli_free(&b);
    /* no -n: until the end (here the context, as stories260K rarely ends) */
    cli_out o = cli(NULL, "run -m %s -p Once -c 200 --temp 0 --json", q(model));
    CHECKF(o.rc == 0 && !strstr(o.out, "\"stop\": \"length\"") &&
               !strstr(o.out, "\"generated_tokens\": 128,"),
           "run without -n: '%.300s'", show(o.out));
    cli_free(&o);
    o = cli(NULL, "run -m %s -p Once -ngl 99", q(model));
    CHECKF(o.rc == 2 && one_line(o.err, o.err_len) && strstr(o.err, "-ngl") &&
               strstr(o.err, "--mem"),
           "-ngl: rc %d, '%s'", o.rc, show(o.err));
    cli_free(&o);
    /* speculative decoding: a draft model (here the model drafting for
     * itself) gives the tokens of --no-spec and keeps every draft token;
     * -md with speculation off, and type draft without -md, are refused;
     * the n-gram drafts give the tokens of --no-spec and are counted */
    o = cli(NULL, "run -m %s -p Once -n 30 --temp 0 --json --no-spec", q(model));
    cli_out od = cli(NULL, "run -m %s -p Once -n 30 --temp 0 --json -md %s", q(model), q(model));
    {
        const char *pa = strstr(o.out, "\"generated_ids\""),
                   *pb = strstr(od.out, "\"generated_ids\"");
        const char *ea = pa ? strchr(pa, ']') : NULL, *eb = pb ? strchr(pb, ']') : NULL;
        const char *dn = strstr(od.out, "\"draft_tokens\": ");
        const char *dk = strstr(od.out, "\"draft_tokens_accepted\": ");
        CHECKF(o.rc == 0 && od.rc == 0 && ea && eb && ea - pa == eb - pb &&
                   !memcmp(pa, pb, (size_t)(ea - pa)) && dn && dk && atoi(dn + 16) > 0 &&
                   atoi(dn + 16) == atoi(dk + 25),
               "-md: '%.300s' vs '%.300s'", show(o.out), show(od.out));
    }
    cli_free(&o);
    cli_free(&od);
    o = cli(NULL, "run -m %s -p Once -md %s --no-spec", q(model), q(model));
    CHECKF(o.rc == 2 && one_line(o.err, o.err_len) && strstr(o.err, "draft model"),
           "-md --no-spec: rc %d, '%s'", o.rc, show(o.err));
    cli_free(&o);
    o = cli(NULL, "run -m %s -p Once --spec-type draft", q(model));
    CHECKF(o.rc == 2 && one_line(o.err, o.err_len) && strstr(o.err, "-md"),
           "--spec-type draft: rc %d, '%s'", o.rc, show(o.err));
    cli_free(&o);
    o = cli(NULL, "run -m %s -p 'a b c a b c a b c' -n 40 --temp 0 --json --no-spec", q(model));
    cli_out o2 = cli(NULL, "run -m %s -p 'a b c a b c a b c' -n 40 --temp 0 --json", q(model));
    const char *ids1 = strstr(o.out, "\"generated_ids\""),
               *ids2 = strstr(o2.out, "\"generated_ids\"");
    const char *end1 = ids1 ? strchr(ids1, ']') : NULL, *end2 = ids2 ? strchr(ids2, ']') : NULL;
    CHECKF(o.rc == 0 && o2.rc == 0 && end1 && end2 && end1 - ids1 == end2 - ids2 &&
               !memcmp(ids1, ids2, (size_t)(end1 - ids1)) &&
               strstr(o.out, "\"draft_tokens\": 0,") && strstr(o2.out, "\"draft_tokens\": "),
           "--no-spec vs spec: '%.300s' vs '%.300s'", show(o.out), show(o2.out));
    cli_free(&o);
    cli_free(&o2);
    /* streamed layers: bench reports a pass's bytes, and per token the
     * passes (2 sequences: half a pass each) and the bytes they read */
    o = cli(NULL, "bench -m %s --mem cpu=1400KiB -p 0 -n 8 -r 1 -t 1 -np 2 -o json", q(model));
    {
        const char *pass = strstr(o.out, "\"stream_bytes_per_pass\": ");
        const char *bpt = strstr(o.out, "\"stream_bytes_per_token\": ");
        const char *ppt = strstr(o.out, "\"stream_passes_per_token\": ");
        const double per_pass = pass ? atof(pass + 25) : 0, per_tok = bpt ? atof(bpt + 26) : 0;
        CHECKF(o.rc == 0 && strstr(o.out, "\"test\": \"tg8x2\"") && per_pass > 0 && ppt &&
                   atof(ppt + 27) == 0.5 && per_tok >= 0.25 * per_pass &&
                   per_tok <= 0.75 * per_pass,
               "bench --mem -np 2: rc %d, '%.400s'", o.rc, show(o.out));
    }
    cli_free(&o);
    /* -d: the cache filled once per test, cut back to the depth before each run */
    o = cli(NULL, "bench -m %s -p 8 -n 4 -d 24 -r 3 -t 1 -np 2", q(model));
    CHECKF(o.rc == 0 && strstr(o.out, "pp8 @ d24") && strstr(o.out, "tg4x2 @ d24"),
           "bench -d 24 -np 2: rc %d, '%s' '%s'", o.rc, show(o.out), show(o.err));
    cli_free(&o);
    o = cli(NULL, "bench -m %s -s 2", q(model));
    CHECKF(o.rc == 2 && one_line(o.err, o.err_len) && strstr(o.err, "-np"), "bench -s: rc %d, '%s'",
           o.rc, show(o.err));
    cli_free(&o);
    o = cli(NULL, "run %s Once extra", q(model));
    CHECKF(o.rc == 2 && one_line(o.err, o.err_len) && strstr(o.err, "'extra'"),
           "a third positional: rc %d, '%s'", o.rc, show(o.err));
    cli_free(&o);
    o = cli(NULL, "plan -m %s --mem cpu=1KiB", q(model));
    CHECKF(o.rc != 0 && one_line(o.err, o.err_len) && !strncmp(o.err, "cllm plan: cpu needs", 20),
           "one prefix: '%s'", show(o.err));
    cli_free(&o);
}

/* A text without end (/dev/zero) is refused at the tokenizer's limit, before
 * the model is opened. */
static void check_text_limit(const char *meta) {
    static const char *const cmds[] = {"run", "perplexity"};
    for (int i = 0; i < 2; i++) {
        cli_out o = cli("/dev/zero", "%s -m %s -f -", cmds[i], q(meta));
        CHECKF(o.rc == 1 && one_line(o.err, o.err_len) && strstr(o.err, "longer than 67108864"),
               "%s -f /dev/zero: rc %d, stderr '%s'", cmds[i], o.rc, show(o.err));
        cli_free(&o);
    }
}

/* -h and --help for every command; an option without its value. */
static void check_usage(void) {
    static const char *const cmds[] = {"run",   "info",       "devices", "plan",
                                       "bench", "perplexity", "version", "embed"};
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        for (int h = 0; h < 2; h++) {
            cli_out o = cli(NULL, "%s %s", cmds[i], h ? "--help" : "-h");
            char want[64];
            snprintf(want, sizeof(want), "usage: cllm %s", cmds[i]);
            CHECKF(o.rc == 0 && strncmp(o.out, want, strlen(want)) == 0 && o.err_len == 0,
                   "%s %s: rc %d, stdout '%.60s', stderr '%s'", cmds[i], h ? "--help" : "-h", o.rc,
                   show(o.out), show(o.err));
            cli_free(&o);
        }
    }
    /* each option that takes a value, given last */
    static const char *const missing[] = {"info -m",
                                          "run -m",
                                          "run -m x -p",
                                          "run -m x -f",
                                          "run -p x -n",
                                          "run -p x --temp",
                                          "run -p x --mem",
                                          "run -p x --kv-type",
                                          "plan -m",
                                          "plan -m x -c",
                                          "plan -m x --mem",
                                          "plan -m x --test-device",
                                          "bench -m",
                                          "bench -m x -t",
                                          "bench -m x -o",
                                          "perplexity -m",
                                          "perplexity -f",
                                          "perplexity -m x -f y --chunks",
                                          "embed -m x -p",
                                          "embed -m x -p y --pooling",
                                          "devices --test-device"};
    for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++) {
        cli_out o = cli(NULL, "%s", missing[i]);
        const char *opt = strrchr(missing[i], ' ') + 1;
        char want[64];
        snprintf(want, sizeof(want), "option '%s' needs a value", opt);
        CHECKF(o.rc == 2 && one_line(o.err, o.err_len) && strstr(o.err, want),
               "'%s': rc %d, stderr '%s'", missing[i], o.rc, show(o.err));
        cli_free(&o);
    }
    cli_out o = cli(NULL, "run --no-such-option");
    CHECK(o.rc == 2 && strstr(o.err, "unknown option '--no-such-option'"));
    cli_free(&o);
}

/* The ids of the "field": [...] array of run --json output, as text. */
static bool json_ids(const char *out, const char *field, char *buf, size_t size) {
    char key[64];
    snprintf(key, sizeof(key), "\"%s\": [", field);
    const char *p = strstr(out, key);
    const char *e = p ? strchr(p, ']') : NULL;
    if (!e || (size_t)(e - p) >= size) return false;
    memcpy(buf, p, (size_t)(e - p));
    buf[e - p] = '\0';
    return true;
}

/* Prompts from files and standard input, a long one, and the context warning. */
static void check_prompt_files(const char *model) {
    const char *prompt = "Once upon a time, there was a little";
    char path[128], big[128];
    snprintf(path, sizeof(path), "%s/prompt.txt", g_dir);
    char text[256];
    snprintf(text, sizeof(text), "%s\n", prompt); /* the trailing newline is dropped */
    CHECK(write_text(path, text, strlen(text)));
    const char *opts = "-n 6 --temp 0 --json";
    cli_out ref = cli(NULL, "run -m %s -p %s %s", q(model), q(prompt), opts);
    cli_out from_file = cli(NULL, "run -m %s -f %s %s", q(model), q(path), opts);
    cli_out from_stdin = cli(path, "run -m %s -f - %s", q(model), opts);
    char want_p[256] = "", want_g[256] = "", got[256] = "";
    CHECK(ref.rc == 0 && json_ids(ref.out, "prompt_ids", want_p, sizeof(want_p)) &&
          json_ids(ref.out, "generated_ids", want_g, sizeof(want_g)));
    for (int k = 0; k < 2; k++) {
        const cli_out *o = k ? &from_stdin : &from_file;
        CHECKF(o->rc == 0 && json_ids(o->out, "prompt_ids", got, sizeof(got)) &&
                   !strcmp(got, want_p),
               "-f %s: rc %d, '%s', want '%s' (stderr '%s')", k ? "-" : "FILE", o->rc, got, want_p,
               show(o->err));
        CHECKF(json_ids(o->out, "generated_ids", got, sizeof(got)) && !strcmp(got, want_g),
               "-f %s: '%s', want '%s'", k ? "-" : "FILE", got, want_g);
    }
    cli_free(&ref);
    cli_free(&from_file);
    cli_free(&from_stdin);

    /* -p and -f together, neither, a file that is not there */
    cli_out o = cli(NULL, "run -m %s -p x -f %s", q(model), q(path));
    CHECK(o.rc == 2 && one_line(o.err, o.err_len));
    cli_free(&o);
    o = cli(NULL, "run -m %s", q(model));
    CHECK(o.rc == 2 && one_line(o.err, o.err_len) && strstr(o.err, "-f FILE"));
    cli_free(&o);
    o = cli(NULL, "run -m %s -f %s/absent.txt", q(model), g_dir);
    CHECK(o.rc == 1 && one_line(o.err, o.err_len) && strstr(o.err, "absent.txt"));
    cli_free(&o);

    /* 200 KiB: more than one argument may hold (128 KiB on Linux). Read whole,
     * it is more tokens than the context: the message counts them all. */
    enum { BIG = 200 << 10 };
    char *long_text = malloc(BIG + 1);
    CHECK(long_text != NULL);
    if (!long_text) return;
    for (size_t i = 0; i < BIG; i++) long_text[i] = "Once upon a time. "[i % 18];
    long_text[BIG] = '\0';
    snprintf(big, sizeof(big), "%s/big.txt", g_dir);
    CHECK(write_text(big, long_text, BIG));
    free(long_text);
    char want_err[128];
    long n_tokens = 0;
    o = cli(big, "run -m %s -f - -n 1", q(model));
    const char *p = strstr(o.err, "the prompt has ");
    CHECKF(o.rc == 1 && p && sscanf(p, "the prompt has %ld tokens", &n_tokens) == 1 &&
               n_tokens > 40000,
           "run -f - (200 KiB): rc %d, stderr '%s'", o.rc, show(o.err));
    cli_free(&o);
    snprintf(want_err, sizeof(want_err), "the prompt has %ld tokens", n_tokens);
    o = cli(NULL, "run -m %s -f %s -n 1", q(model), q(big));
    CHECKF(o.rc == 1 && strstr(o.err, want_err), "run -f FILE (200 KiB): stderr '%s'", show(o.err));
    cli_free(&o);
    /* perplexity reads the same text from standard input (no trailing newline
     * to drop): the same number of tokens */
    o = cli(big, "perplexity -m %s -f - -c 64 --chunks 1 -t 1", q(model));
    snprintf(want_err, sizeof(want_err), "perplexity: %ld tokens, ", n_tokens);
    CHECKF(o.rc == 0 && strstr(o.err, want_err) && strstr(o.out, "[1]"),
           "perplexity -f - (200 KiB): rc %d, stdout '%.80s' stderr '%s'", o.rc, show(o.out),
           show(o.err));
    cli_free(&o);

    /* a context larger than the trained one (2048): a warning, and it runs */
    o = cli(NULL, "run -m %s -p Once -n 1 -c 4096", q(model));
    CHECKF(o.rc == 0 && strstr(o.err, "warning") && strstr(o.err, "4096") && strstr(o.err, "2048"),
           "-c 4096: rc %d, stderr '%s'", o.rc, show(o.err));
    cli_free(&o);
    o = cli(NULL, "run -m %s -p Once -n 1 -c 2048", q(model));
    CHECKF(o.rc == 0 && !strstr(o.err, "warning"), "-c 2048: rc %d, stderr '%s'", o.rc,
           show(o.err));
    cli_free(&o);
    /* (a short text: the warning comes before the text is found too short) */
    o = cli(path, "perplexity -m %s -f - -c 4096", q(model));
    CHECKF(o.rc == 1 && strstr(o.err, "warning") && strstr(o.err, "2048") &&
               strstr(o.err, "fewer than one chunk"),
           "perplexity -c 4096: rc %d, stderr '%s'", o.rc, show(o.err));
    cli_free(&o);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_cli PATH-TO-CLLM\n");
        return 2;
    }
    g_cllm = argv[1];
    snprintf(g_dir, sizeof(g_dir), "/tmp/cllm-test-cli-XXXXXX");
    CHECK(mkdtemp(g_dir) != NULL);
    check_json_checker();

    char meta[128];
    snprintf(meta, sizeof(meta), "%s/hostile-meta.gguf", g_dir);
    CHECK(write_hostile_meta(meta));
    check_errors_once(meta);
    check_hostile_meta(meta);
    check_numbers(meta);
    check_text_limit(meta);
    check_usage();

    static const char *files[] = {"stories260K.gguf", NULL};
    if (refs_have(files)) {
        char model[4096];
        refs_model_path(model, sizeof(model), "stories260K.gguf");
        check_hostile_model(model);
        check_temp_on_model(model);
        check_embed(model);
        check_llama_habits(model);
        check_prompt_files(model);
    }
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "test_cli: could not remove %s\n", g_dir);
    return check_summary("test_cli");
}
