/* cllm plan: where a model's layers go and how many bytes of each kind every
 * device will hold, from the GGUF metadata alone (the plan API of cllm.h). */
#include "cllm-pipeline.h"
#include "cllm.h"
#include "commands.h"
#include "download.h"

#include <stdio.h>
#include <string.h>

static void plan_usage(FILE *f) {
    fprintf(f, "usage: cllm plan -m FILE [options]\n"
               "\n"
               "Places the layers of a model on the devices within their budgets, from the\n"
               "metadata alone, and prints the bytes of each memory kind per device.\n"
               "\n"
               "  -m FILE              the model (GGUF)\n"
               "  -hf USER/NAME[:QUANT]\n"
               "                       instead of -m: a model of the Hugging Face hub,\n"
               "                       downloaded when needed (cllm pull --help)\n"
               "  -md, --model-draft FILE\n"
               "                       a draft model (speculative decoding): planned too, with\n"
               "                       the same context, sequences and cache types\n"
               "  -c N                 context size (default: min(model context, 4096))\n"
               "  -b N                 batch size (default 512)\n"
               "  -t N                 threads (default: physical cores)\n" CLI_KV_USAGE
               "  --no-mmap            the weights read, not mapped\n"
               "  --sessions N         sessions sharing the weights (default 1)\n"
               "  --seqs N             sequences per session, decoded together (default 1;\n"
               "                       a server's slots): N KV caches, compute for all of them\n"
               "  --mem DEVICE=SIZE    budget of a device (e.g. cpu=16GiB); default: free memory\n"
               "  --stream-slots N     when the cpu's layers do not fit its budget, stream the\n"
               "                       first ones through a ring of N slots (default 2)\n"
               "  --no-stream          never stream: refuse a plan that does not fit\n"
               "  --read-bw MB/S       storage read bandwidth for the streaming bound (MB/s);\n"
               "                       default: measured on the file (direct I/O)\n"
               "  --test-device SPEC   enable the test device (debug; e.g. budget=64MiB)\n"
               "  --ranks N            a pipeline over N hosts (mpirun -np N): contiguous\n"
               "                       layers per rank, each rank's CPU planned (--mem cpu=SIZE\n"
               "                       is every rank's budget), the activations exchanged\n"
               "  -v, --verbose        one line per tensor\n"
               "  --json               one JSON object\n"
               "  -h, --help           this help\n");
}

int cli_cmd_plan(int argc, char **argv) {
    const char *path = NULL, *hf = NULL, *draft = NULL;
    bool verbose = false, json = false;
    int n_ranks = 0;
    cllm_plan_params fp = cllm_plan_default_params();
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (cli_is_help(o)) {
            plan_usage(stdout);
            return 0;
        } else if (!strcmp(o, "--no-mmap")) {
            fp.use_mmap = false;
            continue;
        } else if (!strcmp(o, "--no-stream")) {
            fp.stream_slots = 0;
            continue;
        } else if (!strcmp(o, "--verbose") || !strcmp(o, "-v")) {
            verbose = true;
            continue;
        } else if (!strcmp(o, "--json")) {
            json = true;
            continue;
        }
        if (cli_is_hf_option(o)) {
            if (!(hf = cli_value("plan", argc, argv, &i))) return 2;
            continue;
        }
        const int kv = cli_kv_option("plan", o, argc, argv, &i, &fp.type_k, &fp.type_v);
        if (kv == 2) return 2;
        if (kv) continue;
        /* the other options take a value */
        if (!cli_is_one_of(o, "-m --model -c -b -t --sessions --seqs --mem --test-device "
                              "--stream-slots --read-bw --ranks -md --model-draft "
                              "--spec-draft-model")) {
            cli_error("plan", "unknown option '%s' (see cllm plan --help)", o);
            return 2;
        }
        const char *v = cli_value("plan", argc, argv, &i);
        if (!v) return 2;
        long long n;
        bool ok = true;
        if (!strcmp(o, "-m") || !strcmp(o, "--model")) {
            path = v;
        } else if (cli_is_one_of(o, "-md --model-draft --spec-draft-model")) {
            draft = v;
        } else if (!strcmp(o, "-c")) {
            ok = cli_int("plan", o, v, 1, 1 << 24, &n) && (fp.n_ctx = n, true);
        } else if (!strcmp(o, "-b")) {
            ok = cli_int("plan", o, v, 1, 1 << 24, &n) && (fp.n_batch = n, true);
        } else if (!strcmp(o, "-t")) {
            ok = cli_int("plan", o, v, 0, 1024, &n) && (fp.n_threads = (int)n, true);
        } else if (!strcmp(o, "--ranks")) {
            ok = cli_int("plan", o, v, 1, CLLM_PIPE_MAX_RANKS, &n) && (n_ranks = (int)n, true);
        } else if (!strcmp(o, "--seqs")) {
            ok = cli_int("plan", o, v, 1, 64, &n) && (fp.n_seq = (int)n, true);
        } else if (!strcmp(o, "--sessions")) {
            ok = cli_int("plan", o, v, 1, 4096, &n) && (fp.n_sessions = (int)n, true);
        } else if (!strcmp(o, "--mem")) {
            ok = cllm_plan_parse_mem(&fp, v) == CLLM_OK;
            if (!ok) cli_lib_error("plan");
        } else if (!strcmp(o, "--stream-slots")) {
            ok = cli_int("plan", o, v, 2, 64, &n) && (fp.stream_slots = (int)n, true);
        } else if (!strcmp(o, "--read-bw")) {
            float mbps = 0;
            ok = cli_float("plan", o, v, &mbps);
            if (ok && !(mbps > 0)) {
                cli_error("plan", "%s: '%s' is not a positive bandwidth in MB/s", o, v);
                ok = false;
            }
            if (ok) fp.read_bw = (double)mbps * 1e6;
        } else { /* --test-device */
            ok = cli_enable_test_device("plan", v) == 0;
        }
        if (!ok) return 2;
    }
    const int mr = cli_model_arg("plan", hf, &path);
    if (mr != 0) return mr;
    if (n_ranks > 0) {
        if (draft) {
            cli_error("plan", "-md: a draft model is not supported across ranks (--ranks)");
            return 2;
        }
        if (fp.n_seq > 1 || json) {
            cli_error("plan", "--ranks plans sessions of one sequence (--sessions N: N "
                              "concurrent sequences), as text");
            return 2;
        }
        cllm_pipe_plan pp;
        const cllm_status st = cllm_pipe_plan_file(path, &fp, n_ranks, &pp);
        if (st == CLLM_OK || st == CLLM_ERR_TOO_LARGE) cllm_pipe_plan_print(&pp, stdout);
        if (st != CLLM_OK) {
            cli_lib_error("plan");
            return 1;
        }
        return 0;
    }
    cllm_plan *plan = NULL, *dplan = NULL;
    if (cllm_plan_file(path, &fp, &plan) != CLLM_OK) {
        cli_lib_error("plan");
        return 1;
    }
    /* the draft model's session has the target's shape (cli_gen_draft): the
     * same context, sequences, batch and cache types */
    if (draft && cllm_plan_file(draft, &fp, &dplan) != CLLM_OK) {
        cli_error("plan", "-md %s: %s", draft, cllm_last_error());
        cllm_plan_free(plan);
        return 1;
    }
    if (json) {
        if (dplan) fputs("{\"model\": ", stdout);
        cllm_plan_print_json(plan, stdout, verbose);
        if (dplan) {
            fputs(", \"draft\": ", stdout);
            cllm_plan_print_json(dplan, stdout, verbose);
            fputs("}\n", stdout);
        }
    } else {
        cllm_plan_print(plan, stdout, verbose);
        if (dplan) {
            printf("\ndraft model %s (speculative decoding), with the same shape:\n", draft);
            cllm_plan_print(dplan, stdout, verbose);
        }
    }
    cllm_plan_free(plan);
    cllm_plan_free(dplan);
    return 0;
}
