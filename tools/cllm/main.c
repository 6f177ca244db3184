/*
 * cllm — the command-line tool: a thin layer over the library.
 *
 *   cllm run  -m FILE -p TEXT [options]    generate text
 *   cllm info -m FILE                      metadata and tensor table
 *   cllm devices                           devices found, their free and total memory
 *   cllm plan -m FILE [--mem DEV=SIZE]     where the layers go, bytes per device and kind
 *   cllm bench -m FILE [options]           prompt and generation speed
 *   cllm perplexity -m FILE -f TEXT        perplexity as llama-perplexity computes it
 *
 * Errors: one line naming the file and the problem, exit status != 0.
 */
#include "commands.h"
#include "cllm.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: cllm <command> [options]\n"
               "\n"
               "commands:\n"
               "  run   -m FILE -p TEXT    generate text from a prompt\n"
               "  info  -m FILE            print the metadata and the tensor table\n"
               "  devices                  list the devices, their free and total memory\n"
               "  plan  -m FILE            place the layers on the devices, bytes per kind\n"
               "  bench -m FILE            tokens/s of prompt processing and generation\n"
               "                           [-p 512] [-n 128] [-t 1,2] [-r 5] [-b 512] [-c N]\n"
               "                           [--output md|csv|json]\n"
               "  perplexity -m FILE -f TEXT   perplexity over chunks of a text, as llama.cpp's\n"
               "                           llama-perplexity; [-c 512] [-b N] [-t N] [--chunks N]\n"
               "                           (see cllm perplexity --help)\n"
               "  version                  print the version\n"
               "\n"
               "run options:\n"
               "  -n N                 tokens to generate (default 128; -1: until the end)\n"
               "  -c N                 context size (default: min(model context, 4096))\n"
               "  -b N                 prompt batch size (default 512)\n"
               "  -t N                 threads (default: physical cores)\n"
               "  --temp T             temperature (default 0.8; 0: greedy)\n"
               "  --top-k K            top-k (default 40; 0: off)\n"
               "  --top-p P            top-p (default 0.95; 1: off)\n"
               "  --min-p P            min-p (default 0.05; 0: off)\n"
               "  --repeat-penalty R   repetition penalty (default 1: off)\n"
               "  --seed S             sampling seed (default 0)\n"
               "  --chat               wrap the prompt in the model's chat template\n"
               "  --system TEXT        system message for --chat\n"
               "  --kv-type f16|f32    KV cache type (default f16)\n"
               "  --no-mmap            read the weights instead of mapping them\n"
               "  --json               print one JSON object instead of streaming text\n"
               "  --mem DEVICE=SIZE    place layers on devices within budgets (as plan)\n"
               "\n"
               "plan options (reads only the metadata):\n"
               "  -c N, -b N, -t N, --kv-type f16|f32, --no-mmap   as for run\n"
               "  --sessions N         sessions sharing the weights (default 1)\n"
               "  --mem DEVICE=SIZE    budget of a device (e.g. cpu=16GiB); default: free memory\n"
               "  --verbose            one line per tensor\n"
               "  --json               one JSON object\n"
               "\n"
               "debug options (devices, plan, run): --test-device SPEC enables the test device\n"
               "  (e.g. \"budget=64MiB,ops=-rope\"; also CLLM_TEST_DEVICE=SPEC)\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    static const struct {
        const char *name;
        int (*fn)(int argc, char **argv);
    } commands[] = {
        {"run", cllm_cmd_run},               /* cmd-run.c */
        {"info", cllm_cmd_info},             /* cmd-info.c */
        {"devices", cllm_cmd_devices},       /* cmd-devices.c */
        {"plan", cllm_cmd_plan},             /* cmd-plan.c */
        {"bench", cllm_cmd_bench},           /* cmd-bench.c */
        {"perplexity", cllm_cmd_perplexity}, /* cmd-perplexity.c */
    };
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (!strcmp(cmd, commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("cllm %s\n", cllm_version());
        return 0;
    }
    fprintf(stderr, "cllm: unknown command '%s' (see cllm --help)\n", cmd);
    return 2;
}
