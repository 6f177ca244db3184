/*
 * cllm chat: a conversation in the terminal.
 *
 * Each turn renders the whole conversation through the model's chat
 * template and asks the library's batch engine (one sequence) for the
 * answer. The engine keeps its KV cache across turns and decodes only what
 * its cache does not hold (the longest common beginning is reused). So that
 * the tokens of the conversation stay those the model saw and wrote, a turn
 * whose text extends the text they came from (the last rendered prompt plus
 * the answer) is sent as those tokens plus the new text's; otherwise (a
 * template that trims the answer, /system, /load, turns dropped for room)
 * the whole conversation is tokenized anew.
 *
 * When the context is full, the oldest turns (never the system message nor
 * the current one) are dropped and what remains is processed again once,
 * with a notice: before a turn when its prompt and room for an answer do
 * not fit, and during an answer, which then continues where it was.
 */
#include "cllm.h"
#include "commands.h"
#include "download.h"

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

/* What the engine reported of the request being answered. */
typedef struct answer {
    char *text; /* everything printed of this answer */
    size_t len, cap;
    bool oom;
    int32_t *ids; /* [n_ctx]: the tokens of this request */
    size_t n_ids;
    bool finished;
    cllm_stop_reason stop;
    cllm_request_usage usage;
    char error[512];
} answer;

typedef struct chat {
    cli_gen *g;
    const char *style_name; /* --template, or NULL: the model's */
    cllm_model *m;
    cllm_engine *eng; /* one sequence: the conversation's KV cache */
    int64_t n_ctx;

    cllm_chat_msg *msgs; /* contents owned (malloc) */
    size_t n_msgs, cap_msgs;
    char *system; /* the system message (--system, /system), or NULL */

    /* [n_ctx]: the tokens of the conversation as the model saw and wrote
     * them (the last prompt and its answer) */
    int32_t *held;
    size_t n_held;
    char *held_text; /* the text they came from, or NULL when unknown */
    int turn;
    answer *a; /* the answer being generated */
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
        cli_error("chat", "out of memory for the conversation");
        return false;
    }
    size_t n = 0;
    if (c->system) all[n++] = (cllm_chat_msg){.role = "system", .content = c->system};
    memcpy(all + n, c->msgs + skip, (c->n_msgs - skip) * sizeof(*all));
    n += c->n_msgs - skip;
    char *text = NULL;
    size_t len = 0;
    const char *style = c->style_name ? c->style_name : c->g->chat_style;
    const cllm_status st =
        cli_chat_prompt(c->m, style, c->g->chat_template, all, n, &text, has_bos);
    free(all);
    if (st != CLLM_OK) {
        cli_lib_error("chat");
        return false;
    }
    len = strlen(text);
    if (tail && *tail) {
        const size_t k = strlen(tail);
        char *joined = realloc(text, len + k + 1);
        if (!joined) {
            free(text);
            cli_error("chat", "out of memory for the conversation");
            return false;
        }
        memcpy(joined + len, tail, k + 1);
        text = joined;
    }
    *out = text;
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
        cli_error("chat", "out of memory for %zu tokens", n);
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
    cli_lib_error("chat");
    return false;
}

/* The tokens of `text` for the engine, in a new array: the held tokens and
 * the new text's when `text` extends the held text, else all of it
 * tokenized. False after printing the error. */
static bool prompt_for(chat *c, const char *text, bool has_bos, int32_t **ids, size_t *n_ids) {
    const size_t n_text = c->held_text ? strlen(c->held_text) : 0;
    if (c->held_text && c->n_held > 0 && strlen(text) > n_text &&
        !strncmp(text, c->held_text, n_text)) {
        int32_t *more = NULL;
        size_t n_more = 0;
        if (!tokenize(c, text + n_text, strlen(text + n_text), false, &more, &n_more)) return false;
        int32_t *all = malloc((c->n_held + n_more + 1) * sizeof(*all));
        if (!all) {
            free(more);
            cli_error("chat", "out of memory for %zu tokens", c->n_held + n_more);
            return false;
        }
        memcpy(all, c->held, c->n_held * sizeof(*all));
        memcpy(all + c->n_held, more, n_more * sizeof(*all));
        free(more);
        *ids = all;
        *n_ids = c->n_held + n_more;
        return true;
    }
    if (!tokenize(c, text, strlen(text), !has_bos, ids, n_ids)) return false;
    if (*n_ids == 0) {
        free(*ids);
        cli_error("chat", "the conversation renders to no tokens");
        return false;
    }
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
 * Renders the conversation (plus the partial answer `tail`) into its
 * tokens (prompt_for), leaving out the oldest turns while the prompt and
 * `room` tokens do not fit the context; *dropped gets how many messages
 * that takes (the caller drops them). When even the current turn alone
 * leaves no room, it goes on with what fits. False after printing why (also
 * when the current turn alone does not fit); nothing changes then.
 */
static bool fit_prompt(chat *c, const char *tail, size_t room, char **text, int32_t **ids,
                       size_t *n_ids, size_t *dropped) {
    size_t skip = 0;
    for (;;) {
        bool has_bos;
        if (!render(c, skip, tail, text, &has_bos)) return false;
        if (!prompt_for(c, *text, has_bos, ids, n_ids)) {
            free(*text);
            return false;
        }
        const size_t need = *n_ids;
        const size_t next = skip_turn(c, skip);
        if (need + room <= (size_t)c->n_ctx || (next == skip && need < (size_t)c->n_ctx)) {
            *dropped = skip;
            return true;
        }
        free(*text), free(*ids);
        if (next == skip) {
            cli_error("chat",
                      "the turn needs %zu tokens and the context holds %lld (-c sets the "
                      "context)",
                      need, (long long)c->n_ctx);
            return false;
        }
        skip = next;
    }
}

/* The engine's events: the answer's text is printed as it comes. */
static void on_event(const cllm_event *ev, void *ud) {
    chat *c = ud;
    answer *a = c->a;
    if (ev->kind == CLLM_EVENT_TOKEN) {
        if (a->n_ids < (size_t)c->n_ctx) a->ids[a->n_ids++] = ev->token;
        return;
    }
    if (ev->kind == CLLM_EVENT_FINISHED) {
        a->finished = true;
        a->stop = ev->reason;
        a->usage = ev->usage;
        if (ev->error) snprintf(a->error, sizeof(a->error), "%s", ev->error);
        return;
    }
    fwrite(ev->text, 1, ev->len, stdout);
    fflush(stdout);
    if (a->len + ev->len + 1 > a->cap) {
        const size_t cap = (a->len + ev->len + 1) * 2;
        char *nb = realloc(a->text, cap);
        if (!nb) {
            a->oom = true;
            return;
        }
        a->text = nb;
        a->cap = cap;
    }
    memcpy(a->text + a->len, ev->text, ev->len);
    a->len += ev->len;
    a->text[a->len] = '\0';
}

/* Generates the answer to ids[0, n_ids) (at most `max_tokens`; -1: no
 * limit) into *a, stopping at Ctrl-C; false after printing an error. */
static bool generate(chat *c, const int32_t *ids, size_t n_ids, int max_tokens, answer *a) {
    cllm_request_params rp = cllm_request_default_params();
    rp.sampling = c->g->sp;
    rp.spec = c->g->spec;
    rp.max_tokens = max_tokens;
    a->n_ids = 0;
    a->finished = false;
    c->a = a;
    uint64_t id = 0;
    if (cllm_engine_submit(c->eng, ids, n_ids, &rp, NULL, &id) != CLLM_OK) {
        cli_lib_error("chat");
        return false;
    }
    bool cancelled = false;
    while (!a->finished) {
        cllm_engine_step(c->eng);
        if ((g_interrupted || a->oom) && !a->finished && !cancelled) {
            (void)cllm_engine_cancel(c->eng, id);
            cancelled = true;
        }
    }
    if (a->stop == CLLM_STOP_ERROR) {
        cli_error("chat", "%s", a->error);
        return false;
    }
    return true;
}

/*
 * Answers the conversation, whose last message is the user's: streams the
 * answer and appends it as the assistant's message. False after printing
 * an error; the user's message is then taken back and the conversation is
 * as it was.
 */
static bool answer_turn(chat *c) {
    answer a = {0};
    size_t processed = 0, reused = 0, generated = 0, drafted = 0, kept = 0;
    double prompt_ms = 0, gen_ms = 0;
    int remaining = c->g->n_predict;
    char *text = NULL;      /* the text of the last prompt */
    size_t text_answer = 0; /* bytes of the answer already inside `text` */
    bool ok = false, cut = false, first = true;
    c->turn++;
    a.ids = malloc((size_t)c->n_ctx * sizeof(*a.ids));
    if (!a.ids) {
        cli_error("chat", "out of memory");
        goto done;
    }

    for (;;) {
        size_t n_ids = 0;
        int32_t *ids = NULL;
        free(text);
        text = NULL;
        size_t dropped = 0;
        if (!fit_prompt(c, first ? NULL : a.text, answer_room(c), &text, &ids, &n_ids, &dropped)) {
            if (first) goto done;
            cut = true;             /* the answer so far stays */
            text_answer = SIZE_MAX; /* `text` is gone: the held text is not known */
            break;
        }
        if (dropped) {
            drop_messages(c, dropped);
            fprintf(stderr,
                    "%scllm chat: the context is full: the oldest %zu message%s dropped; the "
                    "conversation (%zu tokens) is processed again where it differs\n",
                    first ? "" : "\n", dropped, dropped == 1 ? " is" : "s are", n_ids);
        }
        text_answer = first ? 0 : a.len;
        forget_held_text(c); /* until the answer is known */
        const bool gen_ok = generate(c, ids, n_ids, remaining, &a);
        if (!gen_ok) {
            free(ids);
            goto done;
        }
        /* the conversation's tokens: this prompt and its answer */
        memcpy(c->held, ids, n_ids * sizeof(*ids));
        const size_t n_ans =
            a.n_ids < (size_t)c->n_ctx - n_ids ? a.n_ids : (size_t)c->n_ctx - n_ids;
        memcpy(c->held + n_ids, a.ids, n_ans * sizeof(*ids));
        c->n_held = n_ids + n_ans;
        free(ids);
        if (first) reused = a.usage.n_cached;
        first = false;
        processed += a.usage.n_prompt - a.usage.n_cached;
        generated += a.usage.n_completion;
        prompt_ms += a.usage.prompt_ms;
        gen_ms += a.usage.gen_ms;
        drafted += a.usage.n_drafted;
        kept += a.usage.n_accepted;
        if (remaining >= 0) remaining -= (int)a.usage.n_completion;
        if (a.oom) {
            cli_error("chat", "out of memory for the answer");
            goto done;
        }
        if (a.stop != CLLM_STOP_CONTEXT_FULL || remaining == 0) break;
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
        cli_error("chat", "out of memory for the answer");
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
                "tokens used; %zu draft tokens verified, %zu kept\n",
                c->turn, processed, reused, generated,
                prompt_ms > 0 ? (double)processed / (prompt_ms / 1e3) : 0.0,
                gen_ms > 0 ? (double)generated / (gen_ms / 1e3) : 0.0, c->n_held,
                (long long)c->n_ctx, drafted, kept);
    }
    ok = true;
done:
    if (!ok) {
        if (a.len) fputc('\n', stdout);
        /* take the turn back (turns dropped for room stay dropped) */
        if (c->n_msgs > 0 && !strcmp(c->msgs[c->n_msgs - 1].role, "user")) pop_message(c);
        c->turn--;
    }
    c->a = NULL;
    free(text);
    free(a.text);
    free(a.ids);
    return ok;
}

/* ---- /save and /load --------------------------------------------------- */

/* The conversation as {"messages": [{"role": R, "content": C}, ...]}, the
 * system message first. Valid JSON for any bytes (cli_json_str). */
static bool save_conversation(const chat *c, const char *path) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        cli_error("chat", "/save: %s: %s", path, strerror(errno));
        return false;
    }
    fputs("{\"messages\": [", f);
    size_t k = 0;
    if (c->system) {
        fputs("\n  {\"role\": \"system\", \"content\": ", f);
        cli_json_str(f, c->system, strlen(c->system));
        fputs("}", f);
        k++;
    }
    for (size_t i = 0; i < c->n_msgs; i++, k++) {
        fprintf(f, "%s\n  {\"role\": \"%s\", \"content\": ", k ? "," : "", c->msgs[i].role);
        cli_json_str(f, c->msgs[i].content, strlen(c->msgs[i].content));
        fputs("}", f);
    }
    fputs("\n]}\n", f);
    const bool ok = !ferror(f);
    if (fclose(f) != 0 || !ok) {
        cli_error("chat", "/save: %s: out of memory", path);
        free(text);
        return false;
    }
    /* replaced whole or not at all: a full disk or a kill mid-save leaves
     * the previous file as it was */
    const bool written = cllm_file_write(path, text, len) == CLLM_OK;
    if (!written) cli_error("chat", "/save: %s", cllm_last_error());
    free(text);
    return written;
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
        cli_error("chat", "/load: %s: line %d: %s", path, err.line, err.text);
        return false;
    }
    const json_t *arr = json_is_object(doc) ? json_object_get(doc, "messages") : doc;
    chat next = *c; /* the conversation being read */
    next.msgs = NULL;
    next.n_msgs = next.cap_msgs = 0;
    next.system = NULL;
    bool ok = true;
    if (!json_is_array(arr)) {
        cli_error("chat", "/load: %s: expected {\"messages\": [...]} or an array", path);
        ok = false;
    }
    for (size_t i = 0; ok && i < json_array_size(arr); i++) {
        const json_t *msg = json_array_get(arr, i);
        const json_t *role = json_object_get(msg, "role");
        const json_t *content = json_object_get(msg, "content");
        const char *r = json_is_string(role) ? known_role(json_string_value(role)) : NULL;
        if (!r || !json_is_string(content)) {
            cli_error("chat",
                      "/load: %s: message %zu needs a role (system, user or assistant) and "
                      "a content string",
                      path, i);
            ok = false;
        } else if (!strcmp(r, "system") && i == 0) {
            ok = (next.system = dup_n(json_string_value(content), json_string_length(content)));
        } else {
            ok = push_message(&next, r, json_string_value(content), json_string_length(content));
        }
        if (!ok && r && json_is_string(content)) cli_error("chat", "/load: out of memory");
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
    cli_error("chat", "/load: this cllm was built without JSON support (libjansson)");
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
               "  -m FILE              the model (GGUF)\n"
               "  -hf USER/NAME[:QUANT]\n"
               "                       instead of -m: a model of the Hugging Face hub,\n"
               "                       downloaded when needed (cllm pull --help)\n");
    cli_gen_usage(f, -1);
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
            cli_error("chat", "/system: out of memory");
        } else {
            free(c->system);
            c->system = sys;
            forget_held_text(c);
            fprintf(stderr, "cllm chat: system message %s\n", sys ? "set" : "removed");
        }
    } else if (is_command(line, "/save", &arg) || is_command(line, "/load", &arg)) {
        const bool save = line[1] == 's';
        if (!*arg) {
            cli_error("chat", "%s needs a file name", save ? "/save" : "/load");
        } else if (save ? save_conversation(c, arg) : load_conversation(c, arg)) {
            fprintf(stderr, "cllm chat: %s %zu messages %s ", save ? "saved" : "loaded",
                    c->n_msgs + (c->system != NULL), save ? "to" : "from");
            cllm_escape_fputs(stderr, arg, strlen(arg), CLLM_ESCAPE_TEXT);
            fputc('\n', stderr);
        }
    } else {
        cli_error("chat", "unknown command '%s' (/help lists them)", line);
    }
    return true;
}

int cli_cmd_chat(int argc, char **argv) {
    cli_gen g;
    cli_gen_init(&g, -1);
    chat c = {.g = &g};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (cli_is_help(o)) {
            chat_usage(stdout);
            return 0;
        }
        const int taken = cli_gen_option("chat", &g, argc, argv, &i);
        if (taken == 2) goto usage;
        if (taken == 1) continue;
        if (strcmp(o, "--template") != 0) {
            cli_error("chat", "unknown option '%s' (see cllm chat --help)", o);
            goto usage;
        }
        if (!(c.style_name = cli_value("chat", argc, argv, &i))) goto usage;
        cllm_chat_style style;
        if (cllm_chat_style_from_name(c.style_name, &style) != CLLM_OK) {
            cli_lib_error("chat");
            goto usage;
        }
    }
    if (c.style_name && g.chat_template) {
        cli_error("chat", "--template and --chat-template-file: give one");
        goto usage;
    }
    if (!cli_gen_finish("chat", &g)) goto usage;
    if (!cli_model_from_hf("chat", g.hf, &g.model)) {
        cli_gen_free(&g);
        return 1;
    }

    setlocale(LC_CTYPE, ""); /* libedit reads multibyte characters by it */
    int rc = 1;
    line_reader lr;
    lines_open(&lr, argv[0]);
    if (!cli_gen_load("chat", &g, &c.m)) goto done;
    if (!cli_gen_engine("chat", &g, c.m, 1, on_event, &c, &c.eng)) goto done;
    c.n_ctx = cllm_session_n_ctx(cllm_engine_session(c.eng));
    if (!cli_gen_draft("chat", &g, c.m, 1, c.n_ctx)) goto done;
    c.held = malloc((size_t)c.n_ctx * sizeof(*c.held));
    if (g.system) c.system = dup_str(g.system);
    if (!c.held || (g.system && !c.system)) {
        cli_error("chat", "out of memory");
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
            cli_error("chat", "out of memory for the message");
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
    cllm_engine_free(c.eng);
    cllm_model_free(c.m);
    cli_gen_free(&g);
    return rc;
usage:
    cli_gen_free(&g);
    return 2;
}
