/*
 * The commands of the cllm tool, one file each (cmd-<name>.c). Each returns
 * the process exit status: 0 on success (and after printing its usage for
 * -h/--help), 1 on an error (after printing one line naming the file and the
 * problem), 2 on bad usage.
 *
 * Every message goes to stderr as "cllm COMMAND: ..." on one line, escaped
 * (cllm_escape): messages quote strings of model files and of the command
 * line. Errors of the library are printed once, by the command
 * (cli_lib_error); the log callback prints only the other levels.
 */
#ifndef CLLM_TOOLS_COMMANDS_H
#define CLLM_TOOLS_COMMANDS_H

#include "cllm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

int cli_cmd_run(int argc, char **argv);
int cli_cmd_chat(int argc, char **argv);
int cli_cmd_serve(int argc, char **argv);
int cli_cmd_info(int argc, char **argv);
int cli_cmd_devices(int argc, char **argv);
int cli_cmd_plan(int argc, char **argv);
int cli_cmd_bench(int argc, char **argv);
int cli_cmd_perplexity(int argc, char **argv);
int cli_cmd_pull(int argc, char **argv);
int cli_cmd_embed(int argc, char **argv);

/* --test-device SPEC: enables the test device (0, or 2 after printing why). */
int cli_enable_test_device(const char *cmd, const char *spec);

/* ---- shared by the commands (cli.c) ------------------------------------ */

#if defined(__GNUC__) || defined(__clang__)
#define CLI_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define CLI_PRINTF(fmt_idx, arg_idx)
#endif

/* Routes the library's log to the tool: warnings (and info and debug at the
 * level CLLM_LOG asks for) one escaped line each; errors not (see above). */
void cli_init_log(void);

/* "cllm CMD: MESSAGE" / "cllm CMD: warning: MESSAGE" on stderr, escaped. */
void cli_error(const char *cmd, const char *fmt, ...) CLI_PRINTF(2, 3);
void cli_warn(const char *cmd, const char *fmt, ...) CLI_PRINTF(2, 3);
/* The library's last error, as cli_error. */
void cli_lib_error(const char *cmd);

/* `len` bytes of s as a JSON string (quoted, escaped: valid for any bytes). */
void cli_json_str(FILE *f, const char *s, size_t len);

/* -h or --help */
bool cli_is_help(const char *arg);

/* Whether `arg` is one of the space-separated `words` ("-m --model -c"). */
bool cli_is_one_of(const char *arg, const char *words);

/* The value of the option argv[*i]: argv[*i + 1] (and *i advanced), or NULL
 * after printing that the option needs a value. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);

/* The value `v` of option `opt` as a whole number in [min, max], or false
 * after printing why not (not a number, out of range, overflow). */
bool cli_int(const char *cmd, const char *opt, const char *v, long long min, long long max,
             long long *out);
/* As a float: NaN, infinities, and values too large for a float or too
 * close to 0 (except 0) are refused with the reason. */
bool cli_float(const char *cmd, const char *opt, const char *v, float *out);

/* The KV cache options every command that makes a session takes:
 * --cache-type-k / -ctk TYPE, --cache-type-v / -ctv TYPE (llama.cpp's names)
 * and --kv-type TYPE (both), TYPE one of f16 f32 bf16 q8_0 q4_0.
 * cli_kv_option: 0 when `opt` is none of them; else reads its value
 * (argv[*i + 1], *i advanced) into *k and/or *v: 1, or 2 after an error. */
#define CLI_KV_OPTIONS "--cache-type-k -ctk --cache-type-v -ctv --kv-type"
#define CLI_KV_USAGE                                                                               \
    "  -ctk, --cache-type-k TYPE\n"                                                                \
    "                       K cache type: f16 (default), f32, bf16, q8_0, q4_0\n"                  \
    "  -ctv, --cache-type-v TYPE\n"                                                                \
    "                       V cache type, the same types (q8_0: about half of f16)\n"              \
    "  --kv-type TYPE       both\n"
int cli_kv_option(const char *cmd, const char *opt, int argc, char **argv, int *i, cllm_type *k,
                  cllm_type *v);

/* Texts read by -f longer than this are refused (the tokenizer's limit per
 * call). */
#define CLI_MAX_TEXT ((size_t)64 << 20)

/* The whole of `path` ("-": standard input) into *out (NUL-terminated, free
 * it) and *len; false after printing the problem. */
bool cli_read_text(const char *cmd, const char *path, char **out, size_t *len);

/* A progress bar for a model's load: sets mp's progress_fn to one that
 * draws on stderr, when it is a terminal, once the load has taken more
 * than a second; `bar` must outlive the load. */
typedef struct cli_load_bar {
    double t0, last;
    bool drawn;
} cli_load_bar;
void cli_load_progress(cllm_model_params *mp, cli_load_bar *bar);

/* ---- what run and chat share (genopts.c) --------------------------------- */

/* The model, sampling and memory options of run and chat. */
typedef struct cli_gen {
    const char *model;  /* -m, or the cached file of -hf after cli_gen_finish */
    const char *hf;     /* -hf REPO[:QUANT] (download.h) */
    const char *system; /* --system */
    int n_predict;      /* -n: tokens per answer, -1 until the end */
    int64_t n_ctx, n_batch;
    int n_threads;
    cllm_sampler_params sp;
    cllm_spec_params spec;    /* --spec-type, --draft-max, --draft-min, --spec-ngram-* */
    const char *draft_model;  /* -md FILE: a draft model (speculative decoding) */
    cllm_model *draft_m;      /* it, loaded by cli_gen_draft (owned) */
    cllm_draft *draft;        /* and its session (owned; spec.draft) */
    bool seed_given;          /* --seed; else cli_gen_finish draws one */
    cllm_type type_k, type_v; /* KV cache types (--cache-type-k/-v) */
    bool no_mmap, verbose;
    bool spec_type_given; /* --spec-type */
    cllm_plan_params fit; /* --mem budgets */
    bool use_plan;        /* --mem or --test-device: place layers with the fit planner */
    /* --grammar, --grammar-file or --json-schema: the GBNF text (owned) that
     * sp.grammar points to, and the option that gave it */
    char *grammar;
    const char *grammar_opt;
    const char *chat_style;    /* --chat-template NAME: a built-in format, or NULL */
    char *chat_template;       /* --chat-template-file: Jinja source (owned), or NULL */
    const char *chat_tmpl_src; /* the file's name, for messages */
} cli_gen;

/* The defaults, with `n_predict` tokens per answer. */
void cli_gen_init(cli_gen *g, int n_predict);
/* Frees what the options read from files or made (grammar, template). */
void cli_gen_free(cli_gen *g);
/* The help lines of these options (-n's default as given to init). */
void cli_gen_usage(FILE *f, int n_predict);
/* If argv[*i] is one of these options, takes it (and its value, advancing
 * *i) and returns 1; 0 if it is not one; 2 after printing what is wrong. */
int cli_gen_option(const char *cmd, cli_gen *g, int argc, char **argv, int *i);
/* The name cllm knows option `o` by when it is one of llama.cpp's names for
 * it (--ctx-size: -c, -s: --seed, ...); else o. */
const char *cli_gen_canonical(const char *o);
/* After the options: checks that a model was given and draws a random seed
 * when none was; false after printing the problem. */
bool cli_gen_finish(const char *cmd, cli_gen *g);
/* Loads the model (with the fit planner's placement for --mem); false after
 * printing the error. */
bool cli_gen_load(const char *cmd, cli_gen *g, cllm_model **m);
/* A session of the options' shape on m, and a sampler with their seed
 * (the seed printed with --verbose); a context above the trained one gets
 * a warning. False after printing the error (nothing left allocated). */
bool cli_gen_session(const char *cmd, const cli_gen *g, const cllm_model *m, cllm_session **s,
                     cllm_sampler **smp);

/* With -md: loads the draft model and makes its session for a target m
 * of n_seq sequences of n_ctx tokens (the options' batch, threads and
 * cache types), into g->spec.draft. True without -md; false after printing
 * the error (a vocabulary that is not the target's among them). */
bool cli_gen_draft(const char *cmd, cli_gen *g, const cllm_model *m, int n_seq, int64_t n_ctx);

/* The library's batch engine over n_seq sequences of the options' shape
 * on m (the sampling options checked; events to on_event with user_data); a
 * context above the trained one gets a warning. False after printing the
 * error. */
bool cli_gen_engine(const char *cmd, const cli_gen *g, const cllm_model *m, int n_seq,
                    cllm_event_fn on_event, void *user_data, cllm_engine **out);

/*
 * The prompt text of msgs[0, n) with the opening of the assistant's turn:
 * through the Jinja template `tmpl` when not NULL (--chat-template-file;
 * rendered with messages, add_generation_prompt, bos_token and eos_token),
 * else cllm_chat_apply with `style` (NULL: the model's own template). A new
 * string in *out; *has_bos: the text begins with the BOS token's text
 * (tokenize it without add_special). CLLM_OK, or the library's error.
 */
cllm_status cli_chat_prompt(const cllm_model *m, const char *style, const char *tmpl,
                            const cllm_chat_msg *msgs, size_t n, char **out, bool *has_bos);

/* ---- under mpirun: run and serve across the ranks (pipe.c) --------------- */

typedef struct cllm_pipe cllm_pipe;

/*
 * Starts MPI and opens the pipeline of g's model on every rank, with
 * n_sessions concurrent sequences and waits for another rank of timeout_s
 * (0: the default); for a server, ranks > 0 wait for the next batch without
 * limit. Rank 0 gets -1 and *out; the other ranks serve until rank 0 closes
 * and get their exit status; every rank gets 1 when the pipeline cannot
 * start (rank 0 says why).
 */
int cli_pipe_open(const char *cmd, const cli_gen *g, int n_sessions, double timeout_s, bool server,
                  cllm_pipe **out);
/* Rank 0 at the end: stops the other ranks and prints what each sent and
 * waited (standard error); false after printing the error. */
bool cli_pipe_close(const char *cmd, cllm_pipe *p);

#endif /* CLLM_TOOLS_COMMANDS_H */
