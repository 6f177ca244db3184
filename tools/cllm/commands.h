/*
 * The commands of the cllm tool, one file each (cmd-<name>.c). Each returns
 * the process exit status: 0 on success (and after printing its usage for
 * -h/--help), 1 on an error (after printing one line naming the file and the
 * problem), 2 on bad usage.
 *
 * Every message goes to stderr as "cllm COMMAND: ..." on one line, escaped
 * (cllm_escape): messages quote strings of model files and of the command
 * line. Errors of the library are printed once, by the command
 * (cllm_cli_lib_error); the log callback prints only the other levels.
 */
#ifndef CLLM_TOOLS_COMMANDS_H
#define CLLM_TOOLS_COMMANDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

int cllm_cmd_run(int argc, char **argv);
int cllm_cmd_info(int argc, char **argv);
int cllm_cmd_devices(int argc, char **argv);
int cllm_cmd_plan(int argc, char **argv);
int cllm_cmd_bench(int argc, char **argv);
int cllm_cmd_perplexity(int argc, char **argv);

/* --test-device SPEC: enables the test device (0, or 2 after printing why). */
int cllm_cli_enable_test_device(const char *cmd, const char *spec);

/* ---- shared by the commands (cli.c) ------------------------------------ */

#if defined(__GNUC__) || defined(__clang__)
#define CLLM_CLI_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define CLLM_CLI_PRINTF(fmt_idx, arg_idx)
#endif

/* Routes the library's log to the tool: warnings (and info and debug at the
 * level CLLM_LOG asks for) one escaped line each; errors not (see above). */
void cllm_cli_init_log(void);

/* "cllm CMD: MESSAGE" / "cllm CMD: warning: MESSAGE" on stderr, escaped. */
void cllm_cli_error(const char *cmd, const char *fmt, ...) CLLM_CLI_PRINTF(2, 3);
void cllm_cli_warn(const char *cmd, const char *fmt, ...) CLLM_CLI_PRINTF(2, 3);
/* The library's last error, as cllm_cli_error. */
void cllm_cli_lib_error(const char *cmd);

/* `len` bytes of s as a JSON string (quoted, escaped: valid for any bytes). */
void cllm_cli_json_str(FILE *f, const char *s, size_t len);

/* -h or --help */
bool cllm_cli_is_help(const char *arg);

/* Whether `arg` is one of the space-separated `words` ("-m --model -c"). */
bool cllm_cli_is_one_of(const char *arg, const char *words);

/* The value of the option argv[*i]: argv[*i + 1] (and *i advanced), or NULL
 * after printing that the option needs a value. */
const char *cllm_cli_value(const char *cmd, int argc, char **argv, int *i);

/* The value `v` of option `opt` as a whole number in [min, max], or false
 * after printing why not (not a number, out of range, overflow). */
bool cllm_cli_int(const char *cmd, const char *opt, const char *v, long long min, long long max,
                  long long *out);
/* As a float: NaN, infinities, and values too large for a float or too
 * close to 0 (except 0) are refused with the reason. */
bool cllm_cli_float(const char *cmd, const char *opt, const char *v, float *out);

/* Texts read by -f longer than this are refused (the tokenizer's limit per
 * call). */
#define CLLM_CLI_MAX_TEXT ((size_t)64 << 20)

/* The whole of `path` ("-": standard input) into *out (NUL-terminated, free
 * it) and *len; false after printing the problem. */
bool cllm_cli_read_text(const char *cmd, const char *path, char **out, size_t *len);

#endif /* CLLM_TOOLS_COMMANDS_H */
