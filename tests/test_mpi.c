/*
 * cllm run under mpirun (argv[1] the cllm command, argv[2] mpirun; empty
 * when cllm was built without MPI: the test then reports MPI missing), over
 * loopback on one machine, ranks oversubscribed:
 *
 *  - with 2 and 3 ranks the greedy tokens equal the single-process run's,
 *    on stories260K, TinyLLama-v0 (Q4_0) and SmolLM2-135M (Q4_1), with the
 *    prompt in several micro-batches; every rank reports its memory planned
 *    == allocated (weights, state, compute, workspace, exchange buffers);
 *  - 4 sequences decoded together through the pipeline's session (each
 *    rank's token of one sequence computed while the next rank works on
 *    another's, cllm_session_decode_seqs; argv[3] is cllm-pipeline-bench,
 *    the driver) give every sequence the greedy tokens of the single
 *    process;
 *  - a program of 4 sequences on rank 0's session (prompts of several
 *    sequences in one call, a prompt in micro-batches, steps of a token
 *    each, a step a chunk joins, truncations) gives after every call the
 *    positions and logits, bit for bit, of a local session of 4 sequences
 *    on the whole model (the driver's --check), with 2 and 3 ranks;
 *  - a plan that does not fit names the rank that is short and exits 1;
 *    another command than run under mpirun is refused;
 *  - a rank that fails mid-run is reported by rank 0 ("rank 1 failed"),
 *    and one that stops answering is reported after --pipe-timeout, both
 *    with a non-zero exit, neither hangs;
 *  - cllm serve under mpirun (with curl): 2 and 3 ranks, 2 slots, three
 *    requests at once answer cllm run's greedy text, a longer prompt reuses
 *    a slot's cache, SIGTERM to mpirun stops every rank with exit 0; a rank
 *    that fails makes the request a 500 and the server exit non-zero.
 */
#include "common/check.h"
#include "common/json.h"
#include "common/refs.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *g_cllm, *g_mpirun, *g_driver;
static char g_mpi_env[512]; /* the environment of the commands that start MPI */
static char g_dir[64];

typedef struct run_out {
    int rc;
    char *out, *err;
    double seconds;
} run_out;

static char *slurp(const char *path) {
    size_t n = 0;
    char *s = refs_read_file(path, &n);
    return s ? s : calloc(1, 1);
}

/* Runs the shell command (printf-style) with its outputs captured. */
static run_out run(const char *fmt, ...) {
    char cmd[8192], full[9000], out_path[128], err_path[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    snprintf(out_path, sizeof(out_path), "%s/out", g_dir);
    snprintf(err_path, sizeof(err_path), "%s/err", g_dir);
    snprintf(full, sizeof(full), "%s </dev/null >%s 2>%s", cmd, out_path, err_path);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const int st = system(full);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    run_out o = {.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128,
                 .out = slurp(out_path),
                 .err = slurp(err_path),
                 .seconds =
                     (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9};
    return o;
}

static void run_free(run_out *o) {
    free(o->out);
    free(o->err);
}

/* The "generated_ids": [...] of cllm run --json, as text ("" if absent). */
static void ids_of(const char *text, char *buf, size_t size) {
    buf[0] = '\0';
    const char *p = strstr(text, "\"generated_ids\": [");
    if (!p) return;
    const char *e = strchr(p, ']');
    if (!e) return;
    snprintf(buf, size, "%.*s", (int)(e - p), p);
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* mpirun as root needs these; --bind-to none: oversubscribed ranks must
 * not share one core each while others idle */
#define MPIRUN_OPTS "--oversubscribe --bind-to none"

#define RUN_OPTS "-n 16 --temp 0 -t 1 -b 4 -c 128 --json"

static void check_model(const char *model, const char *prompt) {
    run_out one = run("'%s' run -m '%s' -p '%s' " RUN_OPTS, g_cllm, model, prompt);
    char want[4096], got[4096];
    ids_of(one.out, want, sizeof(want));
    CHECKF(one.rc == 0 && want[0], "%s alone: rc %d: %s", model, one.rc, one.err);
    for (int np = 2; np <= 3; np++) {
        run_out o =
            run("%s'%s' " MPIRUN_OPTS " -np %d '%s' run -m '%s' -p '%s' " RUN_OPTS " --verbose",
                g_mpi_env, g_mpirun, np, g_cllm, model, prompt);
        ids_of(o.out, got, sizeof(got));
        CHECKF(o.rc == 0 && !strcmp(want, got), "%s, %d ranks: rc %d\n  alone: %s\n  ranks: %s\n%s",
               model, np, o.rc, want, got, o.err);
        CHECKF(count(o.err, "memory planned == allocated") == np,
               "%s, %d ranks: not every rank reports planned == allocated:\n%s", model, np, o.err);
        char line[64];
        snprintf(line, sizeof(line), "pipeline rank %d:", np - 1);
        CHECKF(strstr(o.err, line) != NULL, "%s: no figures of the last rank:\n%s", model, o.err);
        run_free(&o);
    }
    run_free(&one);
}

/* The "seq N: ids" lines of the driver's output, in a buffer. */
static void seq_lines(const char *out, char *buf, size_t size) {
    size_t n = 0;
    buf[0] = '\0';
    for (const char *p = out; (p = strstr(p, "\nseq ")); p++) {
        const char *e = strchr(p + 1, '\n');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (n + len + 1 >= size) break;
        memcpy(buf + n, p, len);
        n += len;
        buf[n] = '\0';
    }
}

static void check_seqs(const char *model) {
#define DRIVER_OPTS "-t 1 -b 4 --pp 8 --tg 6 --seqs 4 --reps 1 --ids"
    run_out one = run("%s'%s' -m '%s' " DRIVER_OPTS, g_mpi_env, g_driver, model);
    char want[8192], got[8192];
    seq_lines(one.out, want, sizeof(want));
    CHECKF(one.rc == 0 && count(want, "seq ") == 5, "%s alone: rc %d: %s%s", model, one.rc, one.out,
           one.err);
    for (int np = 2; np <= 3; np++) {
        run_out o = run("%s'%s' " MPIRUN_OPTS " -np %d '%s' -m '%s' " DRIVER_OPTS, g_mpi_env,
                        g_mpirun, np, g_driver, model);
        seq_lines(o.out, got, sizeof(got));
        CHECKF(o.rc == 0 && !strcmp(want, got), "%s, 4 sequences, %d ranks: rc %d\n%s\nvs\n%s\n%s",
               model, np, o.rc, want, got, o.err);
        run_free(&o);
    }
    run_free(&one);
#undef DRIVER_OPTS
}

/* The driver's --check: rank 0's session against a local one. */
static void check_session(const char *model, int np) {
    run_out o = run("%s'%s' " MPIRUN_OPTS " -np %d '%s' -m '%s' -t 1 -c 128 -b 32 --pp 40 --tg 3 "
                    "--seqs 4 --check",
                    g_mpi_env, g_mpirun, np, g_driver, model);
    char want[128];
    snprintf(want, sizeof(want), "check: 4 sequences, %d ranks:", np);
    CHECKF(o.rc == 0 && strstr(o.out, want) && strstr(o.out, "bit for bit the local session's"),
           "%s, %d ranks: the pipeline's session against a local one: rc %d\n%s%s", model, np, o.rc,
           o.out, o.err);
    run_free(&o);
}

static void check_failures(const char *model) {
    /* each rank's budget below its part */
    run_out o = run("%s'%s' " MPIRUN_OPTS " -np 2 '%s' run -m '%s' -p 'Once' -n 4 -t 1 --mem "
                    "cpu=200KiB",
                    g_mpi_env, g_mpirun, g_cllm, model);
    CHECKF(o.rc != 0 && strstr(o.err, "pipeline: rank 0 (layers 0-2) needs") &&
               strstr(o.err, "short"),
           "budget too small: rc %d:\n%s", o.rc, o.err);
    run_free(&o);

    /* other commands would run a copy per rank: refused */
    o = run("%s'%s' " MPIRUN_OPTS " -np 2 '%s' chat -m '%s'", g_mpi_env, g_mpirun, g_cllm, model);
    CHECKF(o.rc != 0 && strstr(o.err, "only cllm run and cllm serve run a model across them"),
           "chat under mpirun: rc %d:\n%s", o.rc, o.err);
    run_free(&o);

    /* rank 1 fails at its third batch: rank 0 says so and the job ends */
    o = run("%s'%s' " MPIRUN_OPTS " -np 2 -x CLLM_PIPE_FAULT=1:2:fail '%s' run -m '%s' -p 'Once' "
            "-n 8 -t 1 --temp 0",
            g_mpi_env, g_mpirun, g_cllm, model);
    CHECKF(o.rc != 0 && strstr(o.err, "rank 1 failed") && strstr(o.err, "injected failure"),
           "failing rank: rc %d:\n%s", o.rc, o.err);
    run_free(&o);

    /* the last of 3 ranks stops answering: rank 0 gives up after 2 s */
    o = run("%s'%s' " MPIRUN_OPTS " -np 3 -x CLLM_PIPE_FAULT=2:3:stall '%s' run -m '%s' -p 'Once' "
            "-n 8 -t 1 --temp 0 --pipe-timeout 2",
            g_mpi_env, g_mpirun, g_cllm, model);
    CHECKF(o.rc != 0 && strstr(o.err, "within 2 s") && o.seconds < 30,
           "stalling rank: rc %d after %.1f s:\n%s", o.rc, o.seconds, o.err);
    run_free(&o);
}

/* ---- cllm serve under mpirun ---- */

typedef struct mpi_server {
    char out[160], err[160], pid[160], rc[160];
    char url[64];
} mpi_server;

/* Starts `mpirun -np np ENV cllm serve ...` in the background; false (with
 * the reason checked) when it does not say it is ready within 60 s. */
static bool mpi_serve_start(mpi_server *sv, int np, const char *env, const char *model) {
    snprintf(sv->out, sizeof(sv->out), "%s/serve.out", g_dir);
    snprintf(sv->err, sizeof(sv->err), "%s/serve.err", g_dir);
    snprintf(sv->pid, sizeof(sv->pid), "%s/serve.pid", g_dir);
    snprintf(sv->rc, sizeof(sv->rc), "%s/serve.rc", g_dir);
    char cmd[8192];
    snprintf(
        cmd, sizeof(cmd),
        "rm -f '%s' '%s'; (%s'%s' " MPIRUN_OPTS " -np %d %s '%s' serve -m '%s' --port 0 "
        "--parallel 2 --ctx-per-slot 128 -b 4 -t 1 --pipe-timeout 20 </dev/null >'%s' 2>'%s' & "
        "echo $! >'%s'; wait $!; echo $? >'%s') >/dev/null 2>&1 &",
        sv->rc, sv->out, g_mpi_env, g_mpirun, np, env, g_cllm, model, sv->out, sv->err, sv->pid,
        sv->rc);
    CHECK(system(cmd) == 0);
    for (int i = 0; i < 600; i++) {
        char *out = slurp(sv->out);
        const char *at = strstr(out, "listening on http://");
        const bool ready = strstr(out, "cllm serve: ready") != NULL;
        if (at && ready) {
            sscanf(at + strlen("listening on "), "%63s", sv->url);
            free(out);
            return true;
        }
        free(out);
        if (access(sv->rc, R_OK) == 0) break; /* it ended */
        const struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    char *err = slurp(sv->err);
    CHECKF(false, "cllm serve under mpirun -np %d did not start:\n%s", np, err);
    free(err);
    return false;
}

/* Waits (up to `seconds`) for mpirun to end; its exit status, or -1. */
static int mpi_serve_wait(const mpi_server *sv, int seconds) {
    for (int i = 0; i < seconds * 10; i++) {
        char *rc = slurp(sv->rc);
        if (rc[0]) {
            const int v = atoi(rc);
            free(rc);
            return v;
        }
        free(rc);
        const struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

static void mpi_serve_kill(const mpi_server *sv, const char *sig) {
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "kill -%s $(cat '%s') 2>/dev/null", sig, sv->pid);
    if (system(cmd) != 0) fprintf(stderr, "test_mpi: %s\n", cmd);
}

/* SIGTERM to the rank 0 process of mpirun's job. */
static void mpi_serve_term_rank0(const mpi_server *sv) {
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "for p in $(pgrep -P $(cat '%s')); do tr '\\0' '\\n' </proc/$p/environ | "
             "grep -qx OMPI_COMM_WORLD_RANK=0 && kill -TERM $p; done; true",
             sv->pid);
    CHECK(system(cmd) == 0);
}

/* POSTs {"prompt": P, "max_tokens": 12, "temperature": 0} for each prompt
 * at once (curl); each answer's HTTP status and body into files k of g_dir. */
static void post_all(const mpi_server *sv, const char *const *prompts, int n) {
    char cmd[8192];
    int len = 0;
    for (int k = 0; k < n; k++) {
        len += snprintf(cmd + len, sizeof(cmd) - (size_t)len,
                        "curl -s -m 120 -o '%s/body%d' -w '%%{http_code}' -X POST "
                        "'%s/v1/completions' -H 'Content-Type: application/json' -d "
                        "'{\"prompt\": \"%s\", \"max_tokens\": 12, \"temperature\": 0}' "
                        ">'%s/code%d' & ",
                        g_dir, k, sv->url, prompts[k], g_dir, k);
    }
    snprintf(cmd + len, sizeof(cmd) - (size_t)len, "wait");
    CHECK(system(cmd) == 0);
}

/* Answer k of post_all: its HTTP status, and (status 200) its text and
 * cached prompt tokens. */
static int answer(int k, char *text, size_t size, long *cached) {
    char path[256];
    snprintf(path, sizeof(path), "%s/code%d", g_dir, k);
    char *code = slurp(path);
    const int status = atoi(code);
    free(code);
    text[0] = '\0';
    *cached = -1;
    snprintf(path, sizeof(path), "%s/body%d", g_dir, k);
    char *body = slurp(path);
    json *j = json_parse(body);
    const char *t = json_str(json_get(json_at(json_get(j, "choices"), 0), "text"));
    if (t) snprintf(text, size, "%s", t);
    const json *d = json_get(json_get(j, "usage"), "prompt_tokens_details");
    if (d) *cached = (long)json_num(json_get(d, "cached_tokens"));
    json_free(j);
    free(body);
    return status;
}

static void check_serve(const char *model) {
    run_out probe = run("command -v curl");
    const bool have = probe.rc == 0;
    run_free(&probe);
    run_out built = run("'%s' serve -m /nonexistent.gguf --port 0", g_cllm);
    const bool served = !strstr(built.err, "built without");
    run_free(&built);
    if (!have || !served) {
        check_missing(
            "curl and cllm serve (apt-get install curl libmicrohttpd-dev libjansson-dev)");
        return;
    }
    static const char *const prompts[3] = {"Once upon a time", "The little dog",
                                           "Lily and Ben went"};
    char want[3][512];
    for (int k = 0; k < 3; k++) {
        run_out o =
            run("'%s' run -m '%s' -p '%s' -n 12 --temp 0 -c 128", g_cllm, model, prompts[k]);
        CHECKF(o.rc == 0, "run alone: %s", o.err);
        snprintf(want[k], sizeof(want[k]), "%s", o.out);
        run_free(&o);
    }
    for (int np = 2; np <= 3; np++) {
        mpi_server sv;
        if (!mpi_serve_start(&sv, np, "", model)) {
            mpi_serve_kill(&sv, "KILL");
            continue;
        }
        /* three requests on two slots: one waits for a slot */
        post_all(&sv, prompts, 3);
        for (int k = 0; k < 3; k++) {
            char text[512];
            long cached;
            const int status = answer(k, text, sizeof(text), &cached);
            CHECKF(status == 200 && !strcmp(text, want[k]),
                   "serve, %d ranks, \"%s\": status %d\n  got  \"%s\"\n  want \"%s\"", np,
                   prompts[k], status, text, want[k]);
        }
        /* the first prompt again, then it and its answer extended: the
         * slot's cache is reused (the prompt decoded past it only) */
        const char *const first[1] = {prompts[0]};
        post_all(&sv, first, 1);
        char text[512];
        long cached;
        int status = answer(0, text, sizeof(text), &cached);
        CHECKF(status == 200 && !strcmp(text, want[0]), "serve, %d ranks, again: status %d", np,
               status);
        char longer[600], want_longer[512];
        snprintf(longer, sizeof(longer), "%s%s", prompts[0], want[0]);
        run_out o = run("'%s' run -m '%s' -p '%s' -n 12 --temp 0 -c 128", g_cllm, model, longer);
        snprintf(want_longer, sizeof(want_longer), "%s", o.out);
        run_free(&o);
        const char *const one[1] = {longer};
        post_all(&sv, one, 1);
        status = answer(0, text, sizeof(text), &cached);
        CHECKF(status == 200 && !strcmp(text, want_longer) && cached > 0,
               "serve, %d ranks, a longer prompt: status %d, %ld cached\n  got  \"%s\"\n  want "
               "\"%s\"",
               np, status, cached, text, want_longer);
        /* SIGTERM to rank 0 (as a user's Ctrl-C on its host): it stops
         * the other ranks, and mpirun exits 0 (mpirun itself, signalled,
         * forwards the signal and exits 1 however its ranks end) */
        mpi_serve_term_rank0(&sv);
        const int rc = mpi_serve_wait(&sv, 60);
        char *err = slurp(sv.err);
        char line[64];
        snprintf(line, sizeof(line), "pipeline rank %d:", np - 1);
        CHECKF(rc == 0 && strstr(err, "SIGTERM: stopping") && strstr(err, line),
               "serve, %d ranks: SIGTERM: exit %d:\n%s", np, rc, err);
        free(err);
        if (rc < 0) mpi_serve_kill(&sv, "KILL");
    }

    /* rank 1 fails at its third batch: the request fails (500) with the
     * pipeline's failure as its message, and the server exits non-zero.
     * (Its stderr is no place to look for the message: mpirun interleaves
     * the ranks' lines there, byte by byte at times.) */
    mpi_server sv;
    if (mpi_serve_start(&sv, 2, "-x CLLM_PIPE_FAULT=1:2:fail", model)) {
        post_all(&sv, prompts, 1);
        char text[512];
        long cached;
        const int status = answer(0, text, sizeof(text), &cached);
        char path[256];
        snprintf(path, sizeof(path), "%s/body0", g_dir);
        char *body = slurp(path);
        json *j = json_parse(body);
        const char *msg = json_str(json_get(json_get(j, "error"), "message"));
        const int rc = mpi_serve_wait(&sv, 60);
        char *err = slurp(sv.err);
        CHECKF(status == 500 && msg && strstr(msg, "pipeline: rank 1 failed") && rc != 0 &&
                   rc != -1,
               "serve, failing rank: status %d, exit %d, body %s:\n%s", status, rc, body, err);
        json_free(j);
        free(body);
        free(err);
        if (rc < 0) mpi_serve_kill(&sv, "KILL");
    }
}

int main(int argc, char **argv) {
    g_cllm = argc > 1 ? argv[1] : "";
    g_mpirun = argc > 2 ? argv[2] : "";
    g_driver = argc > 3 ? argv[3] : "";
    if (!g_mpirun[0] || !g_driver[0]) {
        check_missing(
            "MPI (cllm was built without it: apt-get install libopenmpi-dev openmpi-bin)");
        return check_summary("test_mpi");
    }
    /* Open MPI refuses to run as root without these */
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    snprintf(g_dir, sizeof(g_dir), "/tmp/cllm-test-mpi-XXXXXX");
    if (!mkdtemp(g_dir)) {
        CHECK(!"mkdtemp");
        return check_summary("test_mpi");
    }
    /* Under LeakSanitizer (CI's sanitizer build) the processes that start
     * MPI keep leak detection off: Open MPI's libraries and plugins keep
     * allocations past MPI_Finalize, reported from modules already unloaded
     * and so beyond any suppression by name. The same code of cllm's ranks
     * runs in one process, leak-checked, in test_stage; the runs here
     * without MPI stay checked. */
    const char *asan = getenv("ASAN_OPTIONS");
    snprintf(g_mpi_env, sizeof(g_mpi_env), "ASAN_OPTIONS='%s%sdetect_leaks=0' ", asan ? asan : "",
             asan && asan[0] ? ":" : "");
    static const char *const files[] = {"stories260K.gguf", "TinyLLama-v0.Q4_0.gguf", NULL};
    char path[4096];
    if (refs_have(files)) {
        check_model(refs_model_path(path, sizeof(path), "stories260K.gguf"), "Once upon a time");
        check_seqs(path);
        check_session(path, 2);
        check_session(path, 3);
        check_failures(path);
        check_serve(path);
        check_model(refs_model_path(path, sizeof(path), "TinyLLama-v0.Q4_0.gguf"),
                    "Once upon a time, there was");
    }
    if (refs_fetch_model("smollm2", path, sizeof(path))) {
        check_model(path, "The capital of France is");
        check_seqs(path);
        check_session(path, 3);
    }
    char rm[192];
    snprintf(rm, sizeof(rm), "rm -rf '%s'", g_dir);
    if (system(rm) != 0) fprintf(stderr, "test_mpi: could not remove %s\n", g_dir);
    return check_summary("test_mpi");
}
