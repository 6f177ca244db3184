/*
 * cllm — the command-line tool: a thin layer over the library.
 *
 *   cllm run  -m FILE -p TEXT [options]    generate text (-f FILE: the prompt from a file)
 *   cllm chat -m FILE [options]            a conversation in the terminal
 *   cllm serve -m FILE [options]           an OpenAI-compatible HTTP server
 *   cllm info -m FILE                      metadata and tensor table
 *   cllm devices                           devices found, their free and total memory
 *   cllm plan -m FILE [--mem DEV=SIZE]     where the layers go, bytes per device and kind
 *   cllm bench -m FILE [options]           prompt and generation speed
 *   cllm perplexity -m FILE -f TEXT        perplexity as llama-perplexity computes it
 *   cllm pull USER/NAME[:QUANT]            a model of the Hugging Face hub into the cache
 *   cllm embed -m FILE -p TEXT             embeddings as llama-embedding computes them
 *
 * `cllm COMMAND --help` prints the options of a command. Errors: one line
 * naming the file and the problem, exit status != 0 (commands.h).
 */
#include "commands.h"
#include "cllm-pipeline.h"
#include "cllm.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: cllm <command> [options]\n"
               "\n"
               "commands:\n"
               "  run   -m FILE -p TEXT    generate text from a prompt (-f FILE: from a file)\n"
               "  chat  -m FILE            a conversation with the model in the terminal\n"
               "  serve -m FILE            an HTTP server with OpenAI's API (cllm serve --help)\n"
               "  info  -m FILE            print the metadata and the tensor table\n"
               "  devices                  list the devices, their free and total memory\n"
               "  plan  -m FILE            place the layers on the devices, bytes per kind\n"
               "  bench -m FILE            tokens/s of prompt processing and generation\n"
               "  perplexity -m FILE -f TEXT   perplexity over chunks of a text, as llama.cpp's\n"
               "                           llama-perplexity\n"
               "  pull  USER/NAME[:QUANT]  download a GGUF model of the Hugging Face hub into\n"
               "                           the cache (-hf USER/NAME[:QUANT] instead of -m\n"
               "                           does the same for any command)\n"
               "  embed -m FILE -p TEXT    the embedding of a text, as llama.cpp's\n"
               "                           llama-embedding\n"
               "  version                  print the version\n"
               "\n"
               "cllm <command> --help prints the options of a command.\n"
               "\n"
               "Strings of model files (and messages that quote them) are printed escaped:\n"
               "control bytes and invalid UTF-8 as \\xNN, \\n, \\t, \\\\, terminal controls\n"
               "as \\uXXXX. The text that run generates is printed as the model wrote it.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || cli_is_help(argv[1]) || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    cli_init_log();
    const char *cmd = argv[1];
    static const struct {
        const char *name;
        int (*fn)(int argc, char **argv);
    } commands[] = {
        {"run", cli_cmd_run},               /* cmd-run.c */
        {"chat", cli_cmd_chat},             /* cmd-chat.c */
        {"serve", cli_cmd_serve},           /* cmd-serve.c, server-*.c */
        {"info", cli_cmd_info},             /* cmd-info.c */
        {"devices", cli_cmd_devices},       /* cmd-devices.c */
        {"plan", cli_cmd_plan},             /* cmd-plan.c */
        {"bench", cli_cmd_bench},           /* cmd-bench.c */
        {"perplexity", cli_cmd_perplexity}, /* cmd-perplexity.c */
        {"pull", cli_cmd_pull},             /* cmd-pull.c, download.c */
        {"embed", cli_cmd_embed},           /* cmd-embed.c */
    };
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(cmd, commands[i].name) != 0) continue;
        /* under mpirun every rank would run its own copy of the command:
         * only run and serve spread one model over the ranks */
        if (cllm_pipe_launched() && strcmp(cmd, "run") != 0 && strcmp(cmd, "serve") != 0) {
            fprintf(stderr,
                    "cllm %s: started by mpirun with several ranks, but only cllm run and cllm "
                    "serve run a model across them (see README: Across hosts)\n",
                    cmd);
            return 2;
        }
        return commands[i].fn(argc - 1, argv + 1);
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        if (argc > 2 && cli_is_help(argv[2])) {
            printf("usage: cllm version\n\nPrints the version of cllm.\n");
            return 0;
        }
        if (argc > 2) {
            cli_error("version", "unknown option '%s' (see cllm version --help)", argv[2]);
            return 2;
        }
        printf("cllm %s\n", cllm_version());
        return 0;
    }
    fprintf(stderr, "cllm: unknown command '");
    cllm_escape_fputs(stderr, cmd, strlen(cmd), CLLM_ESCAPE_TEXT);
    fprintf(stderr, "' (see cllm --help)\n");
    return 2;
}
