/*
 * `cllm chat` (the executable is argv[1]) end to end, through a pipe and
 * through a pseudo-terminal, and the random seed of `run` and `chat`:
 *
 *  - turns through a pipe; with --verbose each turn reports the tokens it
 *    processed and reused: the second turn processes only itself;
 *  - SmolLM2 (a real ChatML template): the second answer equals a fresh
 *    greedy generation on the same two-turn history, made here with the
 *    library, and every token of the first turn is reused;
 *  - /reset, /system, /save and /load (a saved conversation continued in a
 *    new process answers as the process that held it all along), a broken
 *    file refused with the conversation kept;
 *  - a small context: the oldest turns are dropped with a notice, before a
 *    turn and in the middle of an answer, which goes on;
 *  - a pseudo-terminal: Ctrl-C stops an answer and returns to the prompt
 *    (the answer kept as far as it went), the up arrow recalls the last
 *    line, Ctrl-C at the prompt exits;
 *  - seeds: without --seed two runs draw different seeds (reported by
 *    --json and --verbose), and --seed with a reported seed repeats the run.
 *
 * stories260K runs with a forced llama2 template and -b 1, so that every
 * token is decoded alone on every path and greedy answers compare exactly.
 * Cases whose model is missing are skipped.
 */
#include "cllm.h"
#include "common/check.h"
#include "common/json.h"
#include "common/refs.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *g_cllm;
static char g_dir[64];

/* ---- running the command ------------------------------------------------ */

typedef struct cli_out {
    int rc;
    char *out, *err; /* NUL-terminated */
} cli_out;

static void cli_free(cli_out *o) {
    free(o->out);
    free(o->err);
    memset(o, 0, sizeof(*o));
}

/* `cllm ARGS` (words for sh; no quotes needed by the callers) with `input`
 * on its standard input. */
static cli_out cli(const char *input, const char *fmt, ...) {
    char args[4096], cmd[8192], in_path[128], out_path[128], err_path[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    snprintf(in_path, sizeof(in_path), "%s/stdin", g_dir);
    snprintf(out_path, sizeof(out_path), "%s/stdout", g_dir);
    snprintf(err_path, sizeof(err_path), "%s/stderr", g_dir);
    FILE *f = fopen(in_path, "w");
    if (f) {
        fputs(input ? input : "", f);
        fclose(f);
    }
    snprintf(cmd, sizeof(cmd), "'%s' %s <%s >%s 2>%s", g_cllm, args, in_path, out_path, err_path);
    cli_out o = {0};
    const int st = system(cmd);
    o.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    o.out = refs_read_file(out_path, NULL);
    o.err = refs_read_file(err_path, NULL);
    if (!o.out) o.out = calloc(1, 1);
    if (!o.err) o.err = calloc(1, 1);
    return o;
}

/* The numbers of the --verbose line of turn `turn`: prompt tokens processed
 * and reused; false when there is no such line. */
static bool turn_counts(const char *err, int turn, long *processed, long *reused) {
    char key[64];
    snprintf(key, sizeof(key), "turn %d: ", turn);
    const char *p = strstr(err, key);
    return p && sscanf(p + strlen(key), "%ld prompt tokens processed, %ld reused", processed,
                       reused) == 2;
}

/* A conversation saved by /save. */
typedef struct saved {
    json *doc;
    const json *msgs;
} saved;

static bool load_saved(const char *path, saved *s) {
    char *text = refs_read_file(path, NULL);
    s->doc = text ? json_parse(text) : NULL;
    free(text);
    s->msgs = json_get(s->doc, "messages");
    return s->msgs != NULL;
}

static const char *saved_role(const saved *s, size_t i) {
    return json_str(json_get(json_at(s->msgs, i), "role"));
}

static const char *saved_content(const saved *s, size_t i) {
    return json_str(json_get(json_at(s->msgs, i), "content"));
}

static bool str_eq(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* ---- the fresh path: the library, one process, no cache ----------------- */

static bool collect(int32_t id, const char *text, size_t len, void *ud) {
    (void)id;
    char *buf = ud;
    const size_t have = strlen(buf);
    if (have + len < 8192) {
        memcpy(buf + have, text, len);
        buf[have + len] = '\0';
    }
    return true;
}

/* The greedy answer to `msgs` (style NULL: the model's template) of at most
 * n_predict tokens, decoding one token at a time when n_batch is 1. */
static bool fresh_answer(const char *model, const char *style, const cllm_chat_msg *msgs, size_t n,
                         int n_predict, int64_t n_batch, char *out) {
    cllm_model *m = NULL;
    cllm_session *s = NULL;
    cllm_sampler *smp = NULL;
    char *text = NULL;
    int32_t ids[4096];
    size_t n_ids = 0;
    bool ok = false;
    cllm_chat_style st;
    cllm_session_params sp = cllm_session_default_params();
    sp.n_batch = n_batch;
    cllm_sampler_params smpp = cllm_sampler_default_params();
    smpp.temperature = 0;
    out[0] = '\0';
    cllm_generate_result res = {0};
    if (cllm_model_load(model, NULL, &m) != CLLM_OK) goto done;
    if (cllm_chat_apply(m, style, msgs, n, true, &text, NULL, &st) != CLLM_OK) goto done;
    if (cllm_tokenize(m, text, strlen(text), !cllm_chat_style_has_bos_text(st), true, ids, 4096,
                      &n_ids) != CLLM_OK) {
        goto done;
    }
    if (cllm_session_new(m, &sp, &s) != CLLM_OK) goto done;
    if (cllm_sampler_new(&smpp, cllm_model_n_vocab(m), &smp) != CLLM_OK) goto done;
    ok = cllm_generate(s, smp, ids, n_ids, n_predict, collect, out, &res) == CLLM_OK;
done:
    if (!ok) fprintf(stderr, "fresh_answer: %s\n", cllm_last_error());
    cllm_generate_result_free(&res);
    free(text);
    cllm_sampler_free(smp);
    cllm_session_free(s);
    cllm_model_free(m);
    return ok;
}

/* ---- through a pipe, stories260K ---------------------------------------- */

#define STORIES "--template llama2 --temp 0 -b 1 -n 24 --verbose"

static void check_turns_reset_save(const char *model) {
    char save1[128], save2[128], input[512];
    snprintf(save1, sizeof(save1), "%s/two.json", g_dir);
    snprintf(save2, sizeof(save2), "%s/reset.json", g_dir);
    snprintf(input, sizeof(input),
             "Once upon a time\nThe cat sat\n/save %s\n/reset\n/unknown\nOnce upon a time\n"
             "/save %s\n/exit\nnever read\n",
             save1, save2);
    cli_out o = cli(input, "chat -m %s " STORIES, model);
    CHECKF(o.rc == 0, "rc %d, stderr %s", o.rc, o.err);
    long p1 = 0, r1 = -1, p2 = 0, r2 = 0, p3 = 0, r3 = 0;
    CHECK(turn_counts(o.err, 1, &p1, &r1) && r1 == 0 && p1 > 0);
    /* the second turn reuses all of the first turn's prompt */
    CHECK(turn_counts(o.err, 2, &p2, &r2));
    CHECKF(r2 >= p1 && p2 > 0, "turn 2: %ld processed, %ld reused; turn 1 processed %ld", p2, r2,
           p1);
    /* after /reset the same first message is the cached prompt again: all
     * of it but the last token (decoded for fresh logits) is reused */
    CHECK(turn_counts(o.err, 3, &p3, &r3));
    CHECKF(p3 == 1 && r3 == p1 - 1, "turn 3: %ld processed, %ld reused", p3, r3);
    CHECK(strstr(o.err, "unknown command '/unknown'") != NULL);
    CHECK(strstr(o.err, "turn 4") == NULL); /* /exit: nothing after it is read */

    saved a = {0}, b = {0};
    CHECK(load_saved(save1, &a) && json_len(a.msgs) == 4);
    CHECK(load_saved(save2, &b) && json_len(b.msgs) == 2);
    if (json_len(a.msgs) == 4 && json_len(b.msgs) == 2) {
        CHECK(str_eq(saved_role(&a, 0), "user") && str_eq(saved_role(&a, 1), "assistant"));
        CHECK(str_eq(saved_content(&a, 0), "Once upon a time"));
        CHECK(str_eq(saved_content(&a, 2), "The cat sat"));
        /* the answer after /reset is the first answer again */
        CHECK(str_eq(saved_content(&b, 0), "Once upon a time"));
        CHECKF(str_eq(saved_content(&b, 1), saved_content(&a, 1)), "'%s' vs '%s'",
               saved_content(&b, 1), saved_content(&a, 1));
        /* both answers are what a fresh greedy generation gives */
        char fresh[8192];
        const cllm_chat_msg one[] = {{"user", "Once upon a time"}};
        CHECK(fresh_answer(model, "llama2", one, 1, 24, 1, fresh));
        CHECKF(str_eq(saved_content(&a, 1), fresh), "'%s' vs fresh '%s'", saved_content(&a, 1),
               fresh);
        const cllm_chat_msg two[] = {{"user", "Once upon a time"},
                                     {"assistant", saved_content(&a, 1)},
                                     {"user", "The cat sat"}};
        CHECK(fresh_answer(model, "llama2", two, 3, 24, 1, fresh));
        CHECKF(str_eq(saved_content(&a, 3), fresh), "'%s' vs fresh '%s'", saved_content(&a, 3),
               fresh);
    }
    json_free(a.doc);
    json_free(b.doc);
    cli_free(&o);
}

#ifdef CLLM_HAVE_JANSSON /* (both read the conversations that /save writes) */
static void check_system_and_load(const char *model) {
    char save1[128], save2[128], save3[128], bad[128], input[1024];
    snprintf(save1, sizeof(save1), "%s/sys.json", g_dir);
    snprintf(save2, sizeof(save2), "%s/all.json", g_dir);
    snprintf(save3, sizeof(save3), "%s/loaded.json", g_dir);
    snprintf(bad, sizeof(bad), "%s/bad.json", g_dir);
    FILE *f = fopen(bad, "w");
    if (f) {
        fputs("{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", f);
        fclose(f);
    }
    /* one process holds three turns; another loads the first two and asks
     * the third: the answers agree */
    snprintf(input, sizeof(input),
             "/system Tell a story.\nOnce upon a time\nThe cat sat\n/save %s\nA dog ran\n"
             "/save %s\n",
             save1, save2);
    cli_out o = cli(input, "chat -m %s " STORIES, model);
    CHECKF(o.rc == 0, "rc %d, stderr %s", o.rc, o.err);
    cli_free(&o);
    snprintf(input, sizeof(input),
             "/load %s\n/load %s/missing.json\n/load %s\nA dog ran\n/save %s\n", save1, g_dir, bad,
             save3);
    o = cli(input, "chat -m %s " STORIES, model);
    CHECKF(o.rc == 0, "rc %d, stderr %s", o.rc, o.err);
    CHECK(strstr(o.err, "loaded 5 messages") != NULL);
    CHECK(strstr(o.err, "missing.json") != NULL);
    CHECK(strstr(o.err, "message 0 needs a role") != NULL);
    saved all = {0}, loaded = {0};
    CHECK(load_saved(save2, &all) && json_len(all.msgs) == 7);
    CHECK(load_saved(save3, &loaded) && json_len(loaded.msgs) == 7);
    if (json_len(all.msgs) == 7 && json_len(loaded.msgs) == 7) {
        CHECK(str_eq(saved_role(&all, 0), "system"));
        CHECK(str_eq(saved_content(&all, 0), "Tell a story."));
        for (size_t i = 0; i < 7; i++) {
            CHECKF(str_eq(saved_content(&all, i), saved_content(&loaded, i)),
                   "message %zu: '%s' vs '%s'", i, saved_content(&all, i),
                   saved_content(&loaded, i));
        }
    }
    json_free(all.doc);
    json_free(loaded.doc);
    cli_free(&o);
}

/* A small context: a turn that does not fit with its answer drops the
 * oldest turn; an answer that fills the context drops one and goes on. */
static void check_context_full(const char *model) {
    char save[128], short_conv[128], input[512];
    snprintf(save, sizeof(save), "%s/full.json", g_dir);
    snprintf(short_conv, sizeof(short_conv), "%s/short.json", g_dir);
    cli_out o = cli("Once upon a time\nThe cat sat\nA dog ran\n",
                    "chat -m %s --template llama2 --temp 0 -b 1 -n 24 -c 110 --verbose", model);
    CHECKF(o.rc == 0, "rc %d, stderr %s", o.rc, o.err);
    CHECK(strstr(o.err, "the oldest 2 messages are dropped") != NULL);
    long p = 0, r = 0;
    CHECK(turn_counts(o.err, 3, &p, &r)); /* the third turn was answered */
    cli_free(&o);

    /* a short first turn, then an answer without a length limit */
    FILE *f = fopen(short_conv, "w");
    if (f) {
        fputs("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, "
              "{\"role\": \"assistant\", \"content\": \"Hello.\"}]}",
              f);
        fclose(f);
    }
    snprintf(input, sizeof(input), "/load %s\nOnce upon a time\n/save %s\n", short_conv, save);
    o = cli(input, "chat -m %s --template llama2 --temp 0 -b 1 -n -1 -c 96", model);
    CHECKF(o.rc == 0, "rc %d, stderr %s", o.rc, o.err);
    const char *drop = strstr(o.err, "the oldest 2 messages are dropped");
    CHECKF(drop != NULL, "stderr %s", o.err);
    /* the answer went on until the context was full again: it stops there,
     * said so */
    CHECK(drop && strstr(drop, "this answer stops here") != NULL);
    saved s = {0};
    CHECK(load_saved(save, &s) && json_len(s.msgs) == 2);
    CHECK(str_eq(saved_content(&s, 0), "Once upon a time"));
    CHECK(saved_content(&s, 1) && strlen(saved_content(&s, 1)) > 100);
    json_free(s.doc);
    cli_free(&o);
}
#endif /* CLLM_HAVE_JANSSON */

/* ---- SmolLM2: a real template; the second turn against a fresh run ------- */

static void check_smollm2(const char *model) {
    char save[128], input[256];
    snprintf(save, sizeof(save), "%s/smol.json", g_dir);
    snprintf(input, sizeof(input), "Name a fruit.\nWhat color is it?\n/save %s\n", save);
    cli_out o = cli(input, "chat -m %s --temp 0 -b 1 -n 32 --verbose", model);
    CHECKF(o.rc == 0, "rc %d, stderr %s", o.rc, o.err);
    long p1 = 0, r1 = 0, p2 = 0, r2 = 0;
    CHECK(turn_counts(o.err, 1, &p1, &r1) && r1 == 0);
    CHECK(turn_counts(o.err, 2, &p2, &r2));
    saved s = {0};
    CHECK(load_saved(save, &s) && json_len(s.msgs) == 4);
    if (json_len(s.msgs) == 4) {
        /* every token of turn 1 (prompt and answer) is reused; only the
         * second turn's text is processed */
        cllm_model *m = NULL;
        int32_t ids[64];
        size_t n_answer = 0;
        if (cllm_model_load(model, NULL, &m) == CLLM_OK) {
            const char *a1 = saved_content(&s, 1);
            CHECK(cllm_tokenize(m, a1, strlen(a1), false, false, ids, 64, &n_answer) == CLLM_OK);
        }
        cllm_model_free(m);
        CHECKF(r2 >= p1 + (long)n_answer - 1 && r2 <= p1 + (long)n_answer + 1,
               "turn 2 reused %ld; turn 1: %ld prompt tokens, answer %zu tokens", r2, p1, n_answer);
        CHECKF(p2 < 24, "turn 2 processed %ld tokens", p2);
        char fresh[8192];
        const cllm_chat_msg two[] = {{"user", "Name a fruit."},
                                     {"assistant", saved_content(&s, 1)},
                                     {"user", "What color is it?"}};
        CHECK(fresh_answer(model, NULL, two, 3, 32, 1, fresh));
        CHECKF(str_eq(saved_content(&s, 3), fresh), "'%s' vs fresh '%s'", saved_content(&s, 3),
               fresh);
    }
    json_free(s.doc);
    cli_free(&o);
}

#ifdef CLLM_HAVE_LIBEDIT /* (the terminal test needs line editing) */

/* ---- a pseudo-terminal ---------------------------------------------------- */

typedef struct pty_run {
    pid_t pid;
    int fd;
    char buf[1 << 16]; /* what the terminal showed */
    size_t len;
} pty_run;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reads what the terminal shows until `needle` appears after offset
 * `from`, or `timeout` seconds pass; true if it appeared. */
static bool pty_wait(pty_run *p, size_t from, const char *needle, double timeout) {
    const double end = now_s() + timeout;
    for (;;) {
        if (p->len > from && strstr(p->buf + from, needle)) return true;
        const double left = end - now_s();
        if (left <= 0) return false;
        struct pollfd pfd = {.fd = p->fd, .events = POLLIN};
        if (poll(&pfd, 1, (int)(left * 1000) + 1) <= 0) continue;
        if (p->len + 1 >= sizeof(p->buf)) return false;
        const ssize_t n = read(p->fd, p->buf + p->len, sizeof(p->buf) - 1 - p->len);
        if (n <= 0) return p->len > from && strstr(p->buf + from, needle);
        p->len += (size_t)n;
        p->buf[p->len] = '\0';
    }
}

/* Waits until the answer to the line just typed has begun: the line's echo
 * ends with a newline (at or after `from`), then more than a few bytes. */
static bool pty_wait_answer(pty_run *p, size_t from, double timeout) {
    if (!pty_wait(p, from, "\n", timeout)) return false;
    const size_t start = (size_t)(strstr(p->buf + from, "\n") - p->buf) + 1;
    const double end = now_s() + timeout;
    while (p->len < start + 16 && now_s() < end) pty_wait(p, p->len, "\x01never", 0.05);
    return p->len >= start + 16;
}

static void pty_send(pty_run *p, const char *keys) {
    const size_t n = strlen(keys);
    CHECK(write(p->fd, keys, n) == (ssize_t)n);
}

/* The exit status of the process, waiting at most `timeout` seconds (then
 * it is killed: -1). */
static int pty_close(pty_run *p, double timeout) {
    const double end = now_s() + timeout;
    int st = 0;
    for (;;) {
        pty_wait(p, p->len, "\x01never", 0.05); /* drain */
        const pid_t r = waitpid(p->pid, &st, WNOHANG);
        if (r == p->pid) break;
        if (now_s() > end) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
            close(p->fd);
            return -1;
        }
    }
    close(p->fd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void check_terminal(const char *model) {
    char save[128];
    snprintf(save, sizeof(save), "%s/tty.json", g_dir);
    pty_run *p = calloc(1, sizeof(*p));
    struct winsize ws = {.ws_row = 40, .ws_col = 200};
    p->pid = forkpty(&p->fd, NULL, NULL, &ws);
    if (p->pid == 0) {
        execl(g_cllm, g_cllm, "chat", "-m", model, "--temp", "0", "-n", "400", "-c", "1024",
              (char *)NULL);
        _exit(127);
    }
    CHECK(p->pid > 0);
    if (p->pid <= 0) {
        free(p);
        return;
    }
    CHECK(pty_wait(p, 0, "> ", 120));
    size_t mark = p->len;
    pty_send(p, "Tell me a long story about a dragon and a knight.\r");
    /* the answer starts: interrupt it */
    CHECK(pty_wait_answer(p, mark, 60));
    pty_send(p, "\x03");
    CHECKF(pty_wait(p, mark, "stopped (Ctrl-C)", 30), "the terminal showed: %s", p->buf + mark);
    mark = p->len;
    CHECK(pty_wait(p, mark - 2, "> ", 30));
    /* the up arrow brings the last line back */
    mark = p->len;
    pty_send(p, "/help\r");
    CHECK(pty_wait(p, mark, "these commands", 30));
    mark = p->len;
    pty_send(p, "\x1b[A\r");
    CHECK(pty_wait(p, mark, "these commands", 30));
    mark = p->len;
    char line[192];
    snprintf(line, sizeof(line), "/save %s\r", save);
    pty_send(p, line);
    CHECK(pty_wait(p, mark, "saved 2 messages", 30));
    /* Ctrl-C at the prompt leaves */
    const char *saved_at = strstr(p->buf + mark, "saved 2 messages");
    CHECK(saved_at && pty_wait(p, (size_t)(saved_at - p->buf), "\n> ", 30));
    pty_send(p, "\x03");
    const int rc = pty_close(p, 30);
    if (rc != 0) {
        char shown[2048];
        const size_t from = p->len > 600 ? p->len - 600 : 0;
        cllm_escape(shown, sizeof(shown), p->buf + from, p->len - from, CLLM_ESCAPE_TEXT);
        CHECKF(rc == 0, "exit status %d; the terminal showed: %s", rc, shown);
    }
    saved s = {0};
    CHECK(load_saved(save, &s) && json_len(s.msgs) == 2);
    if (json_len(s.msgs) == 2) {
        CHECK(str_eq(saved_content(&s, 0), "Tell me a long story about a dragon and a knight."));
        /* the stopped answer is kept as far as it went */
        CHECK(saved_content(&s, 1) && strlen(saved_content(&s, 1)) > 0);
    }
    json_free(s.doc);
    free(p);
}
#endif /* CLLM_HAVE_LIBEDIT */

/* ---- seeds -------------------------------------------------------------- */

/* The "seed" and "generated_ids" of `run --json` output. */
static bool run_json(const char *out, unsigned long long *seed, char *ids, size_t size) {
    json *doc = json_parse(out);
    const json *sd = json_get(doc, "seed"), *gen = json_get(doc, "generated_ids");
    const bool ok = sd && gen;
    if (ok) {
        *seed = (unsigned long long)json_num(sd);
        size_t n = 0;
        ids[0] = '\0';
        for (size_t i = 0; i < json_len(gen) && n + 16 < size; i++) {
            n += (size_t)snprintf(ids + n, size - n, "%d,", (int)json_num(json_at(gen, i)));
        }
    }
    json_free(doc);
    return ok;
}

static void check_seeds(const char *model) {
    unsigned long long s1 = 0, s2 = 0, s3 = 0;
    char ids1[2048], ids2[2048], ids3[2048];
    cli_out a = cli(NULL, "run -m %s -p Once -n 32 --json", model);
    cli_out b = cli(NULL, "run -m %s -p Once -n 32 --json", model);
    CHECK(a.rc == 0 && b.rc == 0);
    CHECK(run_json(a.out, &s1, ids1, sizeof(ids1)) && run_json(b.out, &s2, ids2, sizeof(ids2)));
    CHECKF(s1 != s2, "two runs without --seed drew seed %llu", s1);
    /* JSON numbers are doubles: give back a seed that survives the trip */
    char arg[64];
    snprintf(arg, sizeof(arg), "%llu", s1);
    cli_out c = cli(NULL, "run -m %s -p Once -n 32 --json --seed %s", model, arg);
    CHECK(c.rc == 0 && run_json(c.out, &s3, ids3, sizeof(ids3)));
    if (s1 < (1ull << 53)) {
        CHECKF(s3 == s1 && str_eq(ids3, ids1), "--seed %s: %s vs %s", arg, ids3, ids1);
    }
    cli_free(&a), cli_free(&b), cli_free(&c);
    /* a reported seed given back repeats the run, also from --verbose */
    a = cli(NULL, "run -m %s -p Once -n 32 --verbose", model);
    const char *at = strstr(a.err, "seed ");
    unsigned long long seed = 0;
    CHECK(at && sscanf(at, "seed %llu (random)", &seed) == 1);
    b = cli(NULL, "run -m %s -p Once -n 32 --seed %llu", model, seed);
    CHECK(a.rc == 0 && b.rc == 0 && str_eq(a.out, b.out) && strlen(a.out) > 0);
    cli_free(&a), cli_free(&b);
    /* --temp 0 needs no seed to repeat */
    a = cli(NULL, "run -m %s -p Once -n 32 --temp 0", model);
    b = cli(NULL, "run -m %s -p Once -n 32 --temp 0", model);
    CHECK(a.rc == 0 && str_eq(a.out, b.out));
    cli_free(&a), cli_free(&b);
}

static void check_usage(void) {
    cli_out o = cli(NULL, "chat --help");
    CHECK(o.rc == 0 && strstr(o.out, "/reset") && strstr(o.out, "--template"));
    cli_free(&o);
    o = cli(NULL, "chat -m x --template nope");
    CHECK(o.rc == 2 && strstr(o.err, "unknown chat style"));
    cli_free(&o);
    o = cli(NULL, "chat");
    CHECK(o.rc == 2 && strstr(o.err, "no model given"));
    cli_free(&o);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_cli_chat PATH-TO-CLLM\n");
        return 2;
    }
    g_cllm = argv[1];
    snprintf(g_dir, sizeof(g_dir), "/tmp/cllm-test-chat-XXXXXX");
    CHECK(mkdtemp(g_dir) != NULL);
    check_usage();

    static const char *files[] = {"stories260K.gguf", NULL};
    if (refs_have(files)) {
        char model[4096];
        refs_model_path(model, sizeof(model), "stories260K.gguf");
        check_turns_reset_save(model);
#ifdef CLLM_HAVE_JANSSON
        check_system_and_load(model);
        check_context_full(model);
#else
        check_missing("/load (cllm was built without jansson: apt-get install libjansson-dev)");
#endif
        check_seeds(model);
    }
    char smol[4096];
    if (refs_fetch_model("smollm2", smol, sizeof(smol))) {
        check_smollm2(smol);
#ifdef CLLM_HAVE_LIBEDIT
        check_terminal(smol);
#else
        check_missing(
            "the terminal test (cllm was built without libedit: apt-get install libedit-dev)");
#endif
    }
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "test_cli_chat: could not remove %s\n", g_dir);
    return check_summary("test_cli_chat");
}
