/*
 * cllm chat: a conversation in the terminal.
 *
 * Each turn renders the whole conversation through the model's chat
 * template, but only the tokens the session does not hold yet go through
 * the model: the session keeps its KV cache across turns, and the text its
 * tokens came from (the last rendered prompt plus the answer) is a prefix of
 * the next turn's rendering, so the new turn is the rest of the text. When
 * the text no longer extends it (a template that trims the answer, /system,
 * /load, turns dropped for room), the whole conversation is tokenized and
 * the tokens it shares with the cache (the longest common prefix) are kept.
 *
 * When the context is full, the oldest turns (never the system message nor
 * the current one) are dropped and what remains is processed again once,
 * with a notice: before a turn when its prompt and room for an answer do
 * not fit, and during an answer, which then continues where it was.
 */
#include "cllm.h"
#include "commands.h"

#include <errno.h>
#include <locale.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <wchar.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef CLLM_HAVE_LIBEDIT
#include <histedit.h>
#endif
#ifdef CLLM_HAVE_JANSSON
#include <jansson.h>
#endif

/* ---- Ctrl-C ------------------------------------------------------------ */

/* Set by SIGINT: stops the answer being generated, or (at the prompt) the
 * chat. */
static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
}

/*
 * At the prompt SIGINT is blocked, and the only place it is let in is the
 * wait for input (ppoll, which unblocks it atomically): a Ctrl-C that comes
 * before the wait begins is pending and ends the wait at once, so none is
 * lost between a check of the flag and a blocking read.
 */
static sigset_t g_sigint_only;

/* Waits until standard input can be read; false on Ctrl-C. */
static bool wait_input(void) {
    sigset_t unblocked;
    pthread_sigmask(SIG_SETMASK, NULL, &unblocked);
    sigdelset(&unblocked, SIGINT);
    for (;;) {
        if (g_interrupted) return false;
        struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
        const int r = ppoll(&pfd, 1, NULL, &unblocked);
        if (r > 0) return true;
        if (r < 0 && errno != EINTR) return true; /* the read reports it */
    }
}

/* ---- reading lines ----------------------------------------------------- */

/* Lines typed at a terminal (with editing and history, when built with
 * libedit), or read from a pipe or file. */
typedef struct line_reader {
    bool tty; /* standard input is a terminal: show a prompt */
#ifdef CLLM_HAVE_LIBEDIT
    EditLine *el;
    History *hist;
#endif
    char *buf; /* the plain reader's line */
    size_t cap;
} line_reader;

#ifdef CLLM_HAVE_LIBEDIT
static const char *el_prompt(EditLine *el) {
    (void)el;
    return "> ";
}

/* libedit's character reader: one character from standard input (UTF-8 by
 * the locale), waiting with wait_input. 1, 0 at the end of the input, -1 on
 * Ctrl-C or an error. */
static int el_read_char(EditLine *el, wchar_t *out) {
    (void)el;
    mbstate_t st;
    memset(&st, 0, sizeof(st));
    for (;;) {
        if (!wait_input()) {
            errno = EINTR;
            return -1;
        }
        char b;
        const ssize_t n = read(STDIN_FILENO, &b, 1);
        if (n == 0) return 0;
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            return -1;
        }
        const size_t k = mbrtowc(out, &b, 1, &st);
        if (k == (size_t)-2) continue; /* more bytes of the character */
        if (k == (size_t)-1) {         /* not the locale's encoding: the byte */
            memset(&st, 0, sizeof(st));
            *out = (wchar_t)(unsigned char)b;
        }
        return 1;
    }
}
#endif

static void lines_open(line_reader *r, const char *prog) {
    memset(r, 0, sizeof(*r));
    r->tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
#ifdef CLLM_HAVE_LIBEDIT
    if (!r->tty) return;
    r->el = el_init(prog, stdin, stdout, stderr);
    r->hist = history_init();
    if (!r->el || !r->hist) { /* plain reads then */
        if (r->el) el_end(r->el);
        if (r->hist) history_end(r->hist);
        r->el = NULL, r->hist = NULL;
        return;
    }
    HistEvent ev;
    history(r->hist, &ev, H_SETSIZE, 500);
    el_set(r->el, EL_EDITOR, "emacs");
    el_set(r->el, EL_PROMPT, el_prompt);
    el_set(r->el, EL_SIGNAL, 0); /* Ctrl-C is ours (wait_input) */
    el_set(r->el, EL_GETCFN, el_read_char);
    el_set(r->el, EL_HIST, history, r->hist);
#else
    (void)prog;
#endif
}

static void lines_close(line_reader *r) {
#ifdef CLLM_HAVE_LIBEDIT
    if (r->el) el_end(r->el);
    if (r->hist) history_end(r->hist);
#endif
    free(r->buf);
}

/* A line from a terminal without libedit, read byte by byte after
 * wait_input (no stdio buffer to hide input from the wait). */
static const char *read_tty_line(line_reader *r) {
    size_t n = 0;
    for (;;) {
        if (!wait_input()) return NULL;
        char b;
        const ssize_t k = read(STDIN_FILENO, &b, 1);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) {
            if (n == 0) return NULL;
            break;
        }
        if (b == '\n') break;
        if (n + 2 > r->cap) {
            const size_t cap = r->cap ? 2 * r->cap : 256;
            char *nb = realloc(r->buf, cap);
            if (!nb) return NULL;
            r->buf = nb, r->cap = cap;
        }
        r->buf[n++] = b;
    }
    if (!r->buf && !(r->buf = malloc(r->cap = 1))) return NULL;
    r->buf[n] = '\0';
    return r->buf;
}

/* The next line without its line end, or NULL at the end of the input or
 * when Ctrl-C was pressed at a terminal (g_interrupted). */
static const char *lines_read(line_reader *r) {
    const char *line = NULL;
    if (!r->tty) {
        const ssize_t n = getline(&r->buf, &r->cap, stdin);
        if (n < 0) return NULL;
        r->buf[strcspn(r->buf, "\r\n")] = '\0';
        return r->buf;
    }
    sigset_t old;
    pthread_sigmask(SIG_BLOCK, &g_sigint_only, &old);
#ifdef CLLM_HAVE_LIBEDIT
    if (r->el) {
        int n = 0;
        const char *got = el_gets(r->el, &n);
        if (got && n > 0) {
            free(r->buf);
            r->buf = malloc((size_t)n + 1);
            if (r->buf) {
                memcpy(r->buf, got, (size_t)n + 1);
                r->buf[strcspn(r->buf, "\r\n")] = '\0';
                if (r->buf[0]) {
                    HistEvent ev;
                    history(r->hist, &ev, H_ENTER, r->buf);
                }
                line = r->buf;
            }
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return line;
    }
#endif
    fputs("> ", stdout);
    fflush(stdout);
    line = read_tty_line(r);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (line) r->buf[strcspn(r->buf, "\r")] = '\0';
    return line;
}

/* ---- the conversation -------------------------------------------------- */

typedef struct chat {
    cllm_cli_gen *g;
    const char *style_name; /* --template, or NULL: the model's */
    cllm_model *m;
    cllm_session *s;
    cllm_sampler *smp;
    int64_t n_ctx;

    cllm_chat_msg *msgs; /* contents owned (malloc) */
    size_t n_msgs, cap_msgs;
    char *system; /* the system message (--system, /system), or NULL */

    int32_t *held; /* [n_ctx]: the tokens the session holds */
    size_t n_held;
    char *held_text; /* the text they came from, or NULL when unknown */
    int turn;
} chat;

static char *dup_n(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static char *dup_str(const char *s) { return dup_n(s, strlen(s)); }

static void clear_messages(chat *c) {
    for (size_t i = 0; i < c->n_msgs; i++) free((char *)c->msgs[i].content);
    c->n_msgs = 0;
}

/* Appends a message (a copy of `content`); false when out of memory. */
static bool push_message(chat *c, const char *role, const char *content, size_t len) {
    if (c->n_msgs == c->cap_msgs) {
        const size_t cap = c->cap_msgs ? 2 * c->cap_msgs : 16;
        cllm_chat_msg *grown = realloc(c->msgs, cap * sizeof(*grown));
        if (!grown) return false;
        c->msgs = grown;
        c->cap_msgs = cap;
    }
    char *copy = dup_n(content, len);
    if (!copy) return false;
    c->msgs[c->n_msgs++] = (cllm_chat_msg){.role = role, .content = copy};
    return true;
}

static void pop_message(chat *c) { free((char *)c->msgs[--c->n_msgs].content); }

static void forget_held_text(chat *c) {
    free(c->held_text);
    c->held_text = NULL;
}

/*
 * Renders the conversation from its message `skip` on (the system message
 * first, when there is one) with the opening of the assistant's turn,
 * followed by `tail` (a partial answer being continued; may be NULL). A new
 * string in *out and whether it begins with the BOS token's text; false
 * after printing the error.
 */
static bool render(chat *c, size_t skip, const char *tail, char **out, bool *has_bos) {
    cllm_chat_msg *all = malloc((c->n_msgs - skip + 1) * sizeof(*all));
    if (!all) {
        cllm_cli_error("chat", "out of memory for the conversation");
        return false;
    }
    size_t n = 0;
    if (c->system) all[n++] = (cllm_chat_msg){.role = "system", .content = c->system};
    memcpy(all + n, c->msgs + skip, (c->n_msgs - skip) * sizeof(*all));
    n += c->n_msgs - skip;
    char *text = NULL;
    size_t len = 0;
    cllm_chat_style style;
    const cllm_status st = cllm_chat_apply(c->m, c->style_name, all, n, true, &text, &len, &style);
    free(all);
    if (st != CLLM_OK) {
        cllm_cli_lib_error("chat");
        return false;
    }
    if (tail && *tail) {
        const size_t k = strlen(tail);
        char *joined = realloc(text, len + k + 1);
        if (!joined) {
            free(text);
            cllm_cli_error("chat", "out of memory for the conversation");
            return false;
        }
        memcpy(joined + len, tail, k + 1);
        text = joined;
    }
    *out = text;
    *has_bos = cllm_chat_style_has_bos_text(style);
    return true;
}

/* The tokens of text[0, len) (control tokens parsed; BOS added when
 * add_bos and the model adds one) in a new array; false after printing. */
static bool tokenize(chat *c, const char *text, size_t len, bool add_bos, int32_t **ids,
                     size_t *n_ids) {
    size_t n = 0;
    cllm_status st = cllm_tokenize(c->m, text, len, add_bos, true, NULL, 0, &n);
    if (st != CLLM_OK && st != CLLM_ERR_TOO_LARGE) goto fail;
    int32_t *buf = malloc((n + 1) * sizeof(*buf));
    if (!buf) {
        cllm_cli_error("chat", "out of memory for %zu tokens", n);
        return false;
    }
    if (cllm_tokenize(c->m, text, len, add_bos, true, buf, n + 1, &n) != CLLM_OK) {
        free(buf);
        goto fail;
    }
    *ids = buf;
    *n_ids = n;
    return true;
fail:
    cllm_cli_lib_error("chat");
    return false;
}

/* What the session must decode so that it holds the tokens of `text`:
 * keep its first *keep tokens, then decode ids[0, *n_ids) (at least one, so
 * that there are logits to sample from). False after printing the error. */
static bool prompt_for(chat *c, const char *text, bool has_bos, size_t *keep, int32_t **ids,
                       size_t *n_ids) {
    const size_t n_text = c->held_text ? strlen(c->held_text) : 0;
    if (c->held_text && c->n_held > 0 && strlen(text) > n_text &&
        !strncmp(text, c->held_text, n_text)) {
        /* the held text extends: only its continuation is new */
        *keep = c->n_held;
        return tokenize(c, text + n_text, strlen(text + n_text), false, ids, n_ids);
    }
    int32_t *all = NULL;
    size_t n_all = 0;
    if (!tokenize(c, text, strlen(text), !has_bos, &all, &n_all)) return false;
    if (n_all == 0) {
        free(all);
        cllm_cli_error("chat", "the conversation renders to no tokens");
        return false;
    }
    size_t lcp = 0;
    while (lcp < n_all && lcp < c->n_held && all[lcp] == c->held[lcp]) lcp++;
    if (lcp == n_all) lcp--;
    memmove(all, all + lcp, (n_all - lcp) * sizeof(*all));
    *keep = lcp;
    *ids = all;
    *n_ids = n_all - lcp;
    return true;
}

/* The first message after the oldest turn from message `skip` on (a user
 * message and the answer after it), never the last message (the turn being
 * answered); `skip` itself when there is none to drop. */
static size_t skip_turn(const chat *c, size_t skip) {
    if (skip + 1 >= c->n_msgs) return skip;
    if (skip + 2 < c->n_msgs && !strcmp(c->msgs[skip + 1].role, "assistant")) return skip + 2;
    return skip + 1;
}

/* Forgets the first n messages. */
static void drop_messages(chat *c, size_t n) {
    for (size_t i = 0; i < n; i++) free((char *)c->msgs[i].content);
    memmove(c->msgs, c->msgs + n, (c->n_msgs - n) * sizeof(*c->msgs));
    c->n_msgs -= n;
}

/* Tokens kept free for the answer when a turn starts: -n, at most a
 * quarter of the context (a quarter when -n is -1). */
static size_t answer_room(const chat *c) {
    const size_t quarter = (size_t)c->n_ctx / 4;
    return c->g->n_predict >= 0 && (size_t)c->g->n_predict < quarter ? (size_t)c->g->n_predict
                                                                     : quarter;
}

/*
 * Renders the conversation (plus the partial answer `tail`) and finds what
 * to decode (prompt_for), leaving out the oldest turns while the prompt and
 * `room` tokens do not fit the context; *dropped gets how many messages
 * that takes (the caller drops them). When even the current turn alone
 * leaves no room, it goes on with what fits. False after printing why (also
 * when the current turn alone does not fit); nothing changes then.
 */
static bool fit_prompt(chat *c, const char *tail, size_t room, char **text, size_t *keep,
                       int32_t **ids, size_t *n_ids, size_t *dropped) {
    size_t skip = 0;
    for (;;) {
        bool has_bos;
        if (!render(c, skip, tail, text, &has_bos)) return false;
        if (!prompt_for(c, *text, has_bos, keep, ids, n_ids)) {
            free(*text);
            return false;
        }
        const size_t need = *keep + *n_ids;
        const size_t next = skip_turn(c, skip);
        if (need + room <= (size_t)c->n_ctx || (next == skip && need < (size_t)c->n_ctx)) {
            *dropped = skip;
            return true;
        }
        free(*text), free(*ids);
        if (next == skip) {
            cllm_cli_error("chat",
                           "the turn needs %zu tokens and the context holds %lld (-c sets the "
                           "context)",
                           need, (long long)c->n_ctx);
            return false;
        }
        skip = next;
    }
}

typedef struct answer {
    char *text; /* everything printed of this answer */
    size_t len, cap;
    bool oom;
} answer;

static bool on_text(int32_t id, const char *text, size_t len, void *ud) {
    (void)id;
    answer *a = ud;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    if (a->len + len + 1 > a->cap) {
        const size_t cap = (a->len + len + 1) * 2;
        char *nb = realloc(a->text, cap);
        if (!nb) {
            a->oom = true;
            return false;
        }
        a->text = nb;
        a->cap = cap;
    }
    memcpy(a->text + a->len, text, len);
    a->len += len;
    a->text[a->len] = '\0';
    return !g_interrupted;
}

/* Records that the session now holds ids[0, n) after its first `keep`. */
static void hold(chat *c, size_t keep, const int32_t *ids, size_t n) {
    memcpy(c->held + keep, ids, n * sizeof(*ids));
    c->n_held = keep + n;
}

/*
 * Answers the conversation, whose last message is the user's: streams the
 * answer and appends it as the assistant's message. False after printing
 * an error; the user's message is then taken back and the conversation is
 * as it was.
 */
static bool answer_turn(chat *c) {
    answer a = {0};
    size_t processed = 0, reused = 0, generated = 0;
    double prompt_ms = 0, gen_ms = 0;
    int remaining = c->g->n_predict;
    char *text = NULL;      /* what the tokens held before generating came from */
    size_t text_answer = 0; /* bytes of the answer already inside `text` */
    bool ok = false, cut = false, first = true;
    c->turn++;

    for (;;) {
        size_t keep = 0, n_ids = 0;
        int32_t *ids = NULL;
        free(text);
        text = NULL;
        size_t dropped = 0;
        if (!fit_prompt(c, first ? NULL : a.text, answer_room(c), &text, &keep, &ids, &n_ids,
                        &dropped)) {
            if (first) goto done;
            cut = true;             /* the answer so far stays */
            text_answer = SIZE_MAX; /* `text` is gone: the held text is not known */
            break;
        }
        if (dropped) {
            drop_messages(c, dropped);
            fprintf(stderr,
                    "%scllm chat: the context is full: the oldest %zu message%s dropped; %zu "
                    "tokens of the conversation are processed again\n",
                    first ? "" : "\n", dropped, dropped == 1 ? " is" : "s are", n_ids);
        }
        text_answer = first ? 0 : a.len;
        cllm_status tst = cllm_session_truncate(c->s, (int64_t)keep);
        if (tst != CLLM_OK && keep > 0) {
            /* the sliding-window layers no longer hold the window before
             * `keep`: the held tokens are processed again */
            int32_t *all = malloc((keep + n_ids) * sizeof(*all));
            if (!all) {
                free(ids);
                cllm_cli_error("chat", "out of memory");
                goto done;
            }
            memcpy(all, c->held, keep * sizeof(*all));
            memcpy(all + keep, ids, n_ids * sizeof(*all));
            free(ids);
            ids = all, n_ids += keep, keep = 0;
            tst = cllm_session_truncate(c->s, 0);
        }
        if (tst != CLLM_OK) {
            free(ids);
            cllm_cli_lib_error("chat");
            goto done;
        }
        if (first) reused = keep;
        first = false;
        c->n_held = keep;
        cllm_generate_result res;
        const cllm_status st =
            cllm_generate(c->s, c->smp, ids, n_ids, remaining, on_text, &a, &res);
        if (st != CLLM_OK) {
            free(ids);
            cllm_cli_lib_error("chat");
            goto done;
        }
        hold(c, keep, ids, n_ids);
        free(ids);
        forget_held_text(c); /* it was the text of the tokens before this turn */
        hold(c, c->n_held, res.ids, res.n_gen_decoded);
        processed += n_ids;
        generated += res.n_ids;
        prompt_ms += res.prompt_ms;
        gen_ms += res.gen_ms;
        if (remaining >= 0) remaining -= (int)res.n_ids;
        /* the last token sampled is not decoded: decode it so that the
         * session holds the whole answer (not after a full context) */
        if (res.n_gen_decoded < res.n_ids) {
            const int64_t n_rest = (int64_t)(res.n_ids - res.n_gen_decoded);
            if (cllm_session_decode(c->s, res.ids + res.n_gen_decoded, n_rest) == CLLM_OK) {
                hold(c, c->n_held, res.ids + res.n_gen_decoded, (size_t)n_rest);
            } else {
                text_answer = SIZE_MAX; /* the held text is not known */
            }
        }
        const cllm_stop_reason stop = res.stop;
        cllm_generate_result_free(&res);
        if (a.oom) {
            cllm_cli_error("chat", "out of memory for the answer");
            goto done;
        }
        if (stop != CLLM_STOP_CONTEXT_FULL || remaining == 0) break;
        /* full in the middle of the answer: drop turns, continue it */
        if (skip_turn(c, 0) == 0) {
            cut = true;
            break;
        }
    }
    fputc('\n', stdout);
    fflush(stdout);
    if (g_interrupted) fprintf(stderr, "cllm chat: stopped (Ctrl-C)\n");
    if (cut) {
        fprintf(stderr,
                "cllm chat: the context (%lld tokens) is full: this answer stops here; the next "
                "turn drops it (/reset starts anew, -c sets the context)\n",
                (long long)c->n_ctx);
    }
    if (!push_message(c, "assistant", a.text ? a.text : "", a.len)) {
        cllm_cli_error("chat", "out of memory for the answer");
        goto done;
    }
    /* the held tokens came from `text` and the rest of the answer */
    forget_held_text(c);
    if (text_answer != SIZE_MAX) {
        const size_t n_text = strlen(text), n_more = a.len - text_answer;
        c->held_text = malloc(n_text + n_more + 1);
        if (c->held_text) {
            memcpy(c->held_text, text, n_text);
            memcpy(c->held_text + n_text, a.text + text_answer, n_more);
            c->held_text[n_text + n_more] = '\0';
        }
    }
    if (c->g->verbose) {
        fprintf(stderr,
                "cllm chat: turn %d: %zu prompt tokens processed, %zu reused from the cache, %zu "
                "generated; prompt %.1f tok/s, generation %.1f tok/s; %zu of %lld context "
                "tokens used\n",
                c->turn, processed, reused, generated,
                prompt_ms > 0 ? (double)processed / (prompt_ms / 1e3) : 0.0,
                gen_ms > 0 ? (double)generated / (gen_ms / 1e3) : 0.0, c->n_held,
                (long long)c->n_ctx);
    }
    ok = true;
done:
    if (!ok) {
        if (a.len) fputc('\n', stdout);
        /* take the turn back (turns dropped for room stay dropped); the
         * session keeps the tokens that are known */
        if (c->n_msgs > 0 && !strcmp(c->msgs[c->n_msgs - 1].role, "user")) pop_message(c);
        if (cllm_session_n_past(c->s) != (int64_t)c->n_held) {
            forget_held_text(c);
            (void)cllm_session_truncate(c->s, (int64_t)c->n_held);
        }
        c->turn--;
    }
    free(text);
    free(a.text);
    return ok;
}

/* ---- /save and /load --------------------------------------------------- */

/* The conversation as {"messages": [{"role": R, "content": C}, ...]}, the
 * system message first. Valid JSON for any bytes (cllm_cli_json_str). */
static bool save_conversation(const chat *c, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        cllm_cli_error("chat", "/save: %s: %s", path, strerror(errno));
        return false;
    }
    fputs("{\"messages\": [", f);
    size_t k = 0;
    if (c->system) {
        fputs("\n  {\"role\": \"system\", \"content\": ", f);
        cllm_cli_json_str(f, c->system, strlen(c->system));
        fputs("}", f);
        k++;
    }
    for (size_t i = 0; i < c->n_msgs; i++, k++) {
        fprintf(f, "%s\n  {\"role\": \"%s\", \"content\": ", k ? "," : "", c->msgs[i].role);
        cllm_cli_json_str(f, c->msgs[i].content, strlen(c->msgs[i].content));
        fputs("}", f);
    }
    fputs("\n]}\n", f);
    const bool ok = !ferror(f);
    if (fclose(f) != 0 || !ok) {
        cllm_cli_error("chat", "/save: %s: write error", path);
        return false;
    }
    return true;
}

#ifdef CLLM_HAVE_JANSSON
/* The role names a saved message may have, as the constant strings the
 * conversation uses. */
static const char *known_role(const char *role) {
    static const char *const k_roles[] = {"system", "user", "assistant"};
    for (size_t i = 0; i < sizeof(k_roles) / sizeof(k_roles[0]); i++) {
        if (!strcmp(role, k_roles[i])) return k_roles[i];
    }
    return NULL;
}

/* Replaces the conversation with the one saved in `path` (see
 * save_conversation; a bare array of messages is taken too). On any problem
 * the conversation stays as it was. */
static bool load_conversation(chat *c, const char *path) {
    json_error_t err;
    json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!doc) {
        cllm_cli_error("chat", "/load: %s: line %d: %s", path, err.line, err.text);
        return false;
    }
    const json_t *arr = json_is_object(doc) ? json_object_get(doc, "messages") : doc;
    chat next = *c; /* the conversation being read */
    next.msgs = NULL;
    next.n_msgs = next.cap_msgs = 0;
    next.system = NULL;
    bool ok = true;
    if (!json_is_array(arr)) {
        cllm_cli_error("chat", "/load: %s: expected {\"messages\": [...]} or an array", path);
        ok = false;
    }
    for (size_t i = 0; ok && i < json_array_size(arr); i++) {
        const json_t *msg = json_array_get(arr, i);
        const json_t *role = json_object_get(msg, "role");
        const json_t *content = json_object_get(msg, "content");
        const char *r = json_is_string(role) ? known_role(json_string_value(role)) : NULL;
        if (!r || !json_is_string(content)) {
            cllm_cli_error("chat",
                           "/load: %s: message %zu needs a role (system, user or assistant) and "
                           "a content string",
                           path, i);
            ok = false;
        } else if (!strcmp(r, "system") && i == 0) {
            ok = (next.system = dup_n(json_string_value(content), json_string_length(content)));
        } else {
            ok = push_message(&next, r, json_string_value(content), json_string_length(content));
        }
        if (!ok && r && json_is_string(content)) cllm_cli_error("chat", "/load: out of memory");
    }
    json_decref(doc);
    /* the template must accept it (e.g. alternating turns) */
    if (ok && next.n_msgs > 0) {
        char *text = NULL;
        bool has_bos;
        ok = render(&next, 0, NULL, &text, &has_bos);
        free(text);
    }
    if (!ok) {
        clear_messages(&next);
        free(next.msgs);
        free(next.system);
        return false;
    }
    clear_messages(c);
    free(c->msgs);
    free(c->system);
    c->msgs = next.msgs;
    c->n_msgs = next.n_msgs;
    c->cap_msgs = next.cap_msgs;
    c->system = next.system;
    forget_held_text(c);
    return true;
}
#else
static bool load_conversation(chat *c, const char *path) {
    (void)c, (void)path;
    cllm_cli_error("chat", "/load: this cllm was built without JSON support (libjansson)");
    return false;
}
#endif

/* ---- the loop ---------------------------------------------------------- */

static const char k_commands[] =
    "  /reset          forget the conversation (the system message stays)\n"
    "  /system [TEXT]  set the system message (without TEXT: remove it)\n"
    "  /save FILE      save the conversation as JSON (messages only)\n"
    "  /load FILE      continue a saved conversation\n"
    "  /help           these commands\n"
    "  /exit           leave (also Ctrl-D at the prompt, or Ctrl-C there)\n"
    "Ctrl-C while the model answers stops the answer.\n";

static void chat_usage(FILE *f) {
    fprintf(f, "usage: cllm chat -m FILE [options]\n"
               "\n"
               "A conversation with the model in the terminal: each line you type is a turn,\n"
               "answered through the model's chat template. The session keeps its KV cache\n"
               "between turns, so only the new turn is processed. Lines read from a pipe work\n"
               "the same (printf 'Hi\\n/exit\\n' | cllm chat -m FILE).\n"
               "\n"
               "  -m FILE              the model (GGUF)\n");
    cllm_cli_gen_usage(f, -1);
    fprintf(f,
            "  --template STYLE     the chat template (chatml, llama2, llama3, gemma, zephyr,\n"
            "                       phi3)\n"
            "                       instead of the one the model names\n"
            "  -h, --help           this help\n"
            "\n"
            "Commands during the chat:\n%s",
            k_commands);
}

/* Whether line is `/name` alone or followed by a space; *arg gets what
 * follows (spaces skipped), or "" */
static bool is_command(const char *line, const char *name, const char **arg) {
    const size_t n = strlen(name);
    if (strncmp(line, name, n) != 0 || (line[n] && line[n] != ' ')) return false;
    const char *a = line + n;
    while (*a == ' ') a++;
    *arg = a;
    return true;
}

/* Runs one command line (starting with '/'); false for /exit. */
static bool run_command(chat *c, const char *line) {
    const char *arg;
    if (is_command(line, "/exit", &arg) || is_command(line, "/quit", &arg)) return false;
    if (is_command(line, "/help", &arg)) {
        fputs(k_commands, stderr);
    } else if (is_command(line, "/reset", &arg)) {
        clear_messages(c);
        forget_held_text(c); /* the cache keeps what the next turn shares */
        fprintf(stderr, "cllm chat: the conversation is reset\n");
    } else if (is_command(line, "/system", &arg)) {
        char *sys = *arg ? dup_str(arg) : NULL;
        if (*arg && !sys) {
            cllm_cli_error("chat", "/system: out of memory");
        } else {
            free(c->system);
            c->system = sys;
            forget_held_text(c);
            fprintf(stderr, "cllm chat: system message %s\n", sys ? "set" : "removed");
        }
    } else if (is_command(line, "/save", &arg) || is_command(line, "/load", &arg)) {
        const bool save = line[1] == 's';
        if (!*arg) {
            cllm_cli_error("chat", "%s needs a file name", save ? "/save" : "/load");
        } else if (save ? save_conversation(c, arg) : load_conversation(c, arg)) {
            fprintf(stderr, "cllm chat: %s %zu messages %s ", save ? "saved" : "loaded",
                    c->n_msgs + (c->system != NULL), save ? "to" : "from");
            cllm_escape_fputs(stderr, arg, strlen(arg), CLLM_ESCAPE_TEXT);
            fputc('\n', stderr);
        }
    } else {
        cllm_cli_error("chat", "unknown command '%s' (/help lists them)", line);
    }
    return true;
}

int cllm_cmd_chat(int argc, char **argv) {
    cllm_cli_gen g;
    cllm_cli_gen_init(&g, -1);
    chat c = {.g = &g};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (cllm_cli_is_help(o)) {
            chat_usage(stdout);
            return 0;
        }
        const int taken = cllm_cli_gen_option("chat", &g, argc, argv, &i);
        if (taken == 2) return 2;
        if (taken == 1) continue;
        if (strcmp(o, "--template") != 0) {
            cllm_cli_error("chat", "unknown option '%s' (see cllm chat --help)", o);
            return 2;
        }
        if (!(c.style_name = cllm_cli_value("chat", argc, argv, &i))) return 2;
        cllm_chat_style style;
        if (cllm_chat_style_from_name(c.style_name, &style) != CLLM_OK) {
            cllm_cli_lib_error("chat");
            return 2;
        }
    }
    if (!cllm_cli_gen_finish("chat", &g)) return 2;

    setlocale(LC_CTYPE, ""); /* libedit reads multibyte characters by it */
    int rc = 1;
    line_reader lr;
    lines_open(&lr, argv[0]);
    if (!cllm_cli_gen_load("chat", &g, &c.m)) goto done;
    if (!cllm_cli_gen_session("chat", &g, c.m, &c.s, &c.smp)) goto done;
    c.n_ctx = cllm_session_n_ctx(c.s);
    c.held = malloc((size_t)c.n_ctx * sizeof(*c.held));
    if (g.system) c.system = dup_str(g.system);
    if (!c.held || (g.system && !c.system)) {
        cllm_cli_error("chat", "out of memory");
        goto done;
    }
    { /* the template must be known before the first turn */
        char *probe = NULL;
        bool has_bos;
        if (!push_message(&c, "user", "", 0)) goto done;
        const bool ok = render(&c, 0, NULL, &probe, &has_bos);
        pop_message(&c);
        free(probe);
        if (!ok) goto done;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigemptyset(&g_sigint_only);
    sigaddset(&g_sigint_only, SIGINT);
    if (lr.tty) {
        fprintf(stderr, "cllm chat: type a message; /help for the commands, /exit or Ctrl-D to "
                        "leave\n");
    }
    for (;;) {
        g_interrupted = 0;
        const char *line = lines_read(&lr);
        if (!line) {
            if (lr.tty) fputc('\n', stdout);
            break; /* end of input, or Ctrl-C at the prompt */
        }
        if (!line[0]) continue;
        if (line[0] == '/') {
            if (!run_command(&c, line)) break;
            continue;
        }
        if (!push_message(&c, "user", line, strlen(line))) {
            cllm_cli_error("chat", "out of memory for the message");
            continue;
        }
        answer_turn(&c);
    }
    rc = 0;
done:
    lines_close(&lr);
    clear_messages(&c);
    free(c.msgs);
    free(c.system);
    free(c.held);
    free(c.held_text);
    cllm_sampler_free(c.smp);
    cllm_session_free(c.s);
    cllm_model_free(c.m);
    return rc;
}
