/* cllm plan: where a model's layers go and how many bytes of each kind every
 * device will hold, from the GGUF metadata alone (the plan API of cllm.h). */
#include "cllm.h"
#include "commands.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool parse_count(const char *s, long long min, long long max, long long *out) {
    char *end;
    errno = 0;
    const long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < min || v > max) return false;
    *out = v;
    return true;
}

/* Errors are printed once, by the command (from cllm_last_error). */
static void log_no_errors(cllm_log_level level, const char *msg, void *ud) {
    (void)ud;
    if (level == CLLM_LOG_WARN) fprintf(stderr, "cllm warning: %s\n", msg);
}

int cllm_cmd_plan(int argc, char **argv) {
    cllm_log_set(log_no_errors, NULL);
    const char *path = NULL;
    bool verbose = false, json = false;
    cllm_plan_params fp = cllm_plan_default_params();
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long n;
        bool ok = true, takes_value = true;
        if (!strcmp(o, "-m") || !strcmp(o, "--model")) {
            ok = v != NULL;
            path = v;
        } else if (!strcmp(o, "-c")) {
            ok = parse_count(v, 1, 1 << 24, &n) && (fp.n_ctx = n, true);
        } else if (!strcmp(o, "-b")) {
            ok = parse_count(v, 1, 1 << 24, &n) && (fp.n_batch = n, true);
        } else if (!strcmp(o, "-t")) {
            ok = parse_count(v, 0, 1024, &n) && (fp.n_threads = (int)n, true);
        } else if (!strcmp(o, "--sessions")) {
            ok = parse_count(v, 1, 4096, &n) && (fp.n_sessions = (int)n, true);
        } else if (!strcmp(o, "--kv-type")) {
            ok = v && (!strcmp(v, "f16") || !strcmp(v, "f32"));
            if (ok) fp.kv_type = !strcmp(v, "f16") ? CLLM_TYPE_F16 : CLLM_TYPE_F32;
        } else if (!strcmp(o, "--mem")) {
            if (!v) {
                ok = false;
            } else if (cllm_plan_parse_mem(&fp, v) != CLLM_OK) {
                fprintf(stderr, "cllm plan: %s\n", cllm_last_error());
                return 2;
            }
        } else if (!strcmp(o, "--test-device")) {
            if (!v) {
                ok = false;
            } else {
                const int rc = cllm_cli_enable_test_device("plan", v);
                if (rc) return rc;
            }
        } else if (!strcmp(o, "--no-mmap")) {
            fp.use_mmap = false;
            takes_value = false;
        } else if (!strcmp(o, "--verbose") || !strcmp(o, "-v")) {
            verbose = true;
            takes_value = false;
        } else if (!strcmp(o, "--json")) {
            json = true;
            takes_value = false;
        } else {
            fprintf(stderr, "cllm plan: unknown option '%s'\n", o);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "cllm plan: bad or missing value for %s\n", o);
            return 2;
        }
        if (takes_value) i++;
    }
    if (!path) {
        fprintf(stderr, "cllm plan: no model given (-m FILE)\n");
        return 2;
    }
    cllm_plan *plan = NULL;
    if (cllm_plan_file(path, &fp, &plan) != CLLM_OK) {
        fprintf(stderr, "cllm: %s\n", cllm_last_error());
        return 1;
    }
    if (json) {
        cllm_plan_print_json(plan, stdout, verbose);
    } else {
        cllm_plan_print(plan, stdout, verbose);
    }
    cllm_plan_free(plan);
    return 0;
}
