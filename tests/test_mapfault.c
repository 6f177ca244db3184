/*
 * A mapped model file that changes under the model (runtime/mapguard.h,
 * cllm_model_check).
 *
 * The guard: a read of a guarded mapping past its truncated file's end
 * reads zeros and raises the range's flag instead of SIGBUS; the same read
 * of a mapping that is not guarded still kills the process with SIGBUS, and
 * so does a SIGBUS sent with kill. The model: a copy of a small model,
 * loaded mapped, decodes; truncated, its decode fails with CLLM_ERR_IO
 * naming the file and cllm_model_check says why, the process alive; a
 * truncation while another thread decodes in a loop; a copy overwritten in
 * place (same size) is refused the same way; a model read whole
 * (use_mmap = false) does not depend on its file.
 */
#include "cllm.h"
#include "common/check.h"
#include "common/refs.h"
#include "runtime/mapguard.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FILE_SIZE 65536

static char g_dir[512];

static void quiet_log(cllm_log_level level, const char *msg, void *user_data) {
    (void)level, (void)msg, (void)user_data;
}

/* A file of FILE_SIZE bytes 0x5a, mapped; its descriptor in *fd. */
static unsigned char *map_file(const char *name, int *fd) {
    char path[700];
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    *fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (*fd < 0) return NULL;
    unsigned char buf[FILE_SIZE];
    memset(buf, 0x5a, sizeof(buf));
    if (write(*fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf)) return NULL;
    void *p = mmap(NULL, FILE_SIZE, PROT_READ, MAP_PRIVATE, *fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void test_guard(void) {
    int fd;
    volatile unsigned char *p = map_file("guarded", &fd);
    CHECK(p != NULL);
    if (!p) return;
    _Atomic int flag = 0;
    const long before = cllm_mapguard_faults();
    CHECK(cllm_mapguard_add((void *)p, FILE_SIZE, &flag) == CLLM_OK);
    CHECK(p[FILE_SIZE / 2] == 0x5a && atomic_load(&flag) == 0);
    CHECK(ftruncate(fd, 4096) == 0);
    CHECK(p[100] == 0x5a);        /* before the new end: the file */
    CHECK(p[FILE_SIZE / 2] == 0); /* past it: zeros, no SIGBUS */
    CHECK(p[FILE_SIZE - 1] == 0); /* the rest of the range at once */
    CHECK(atomic_load(&flag) == 1);
    CHECK(cllm_mapguard_faults() == before + 1);
    cllm_mapguard_remove((void *)p);
    munmap((void *)p, FILE_SIZE);
    close(fd);

    /* not guarded: SIGBUS kills as before (the handler is installed) */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int cfd;
        volatile unsigned char *q = map_file("unguarded", &cfd);
        if (!q || ftruncate(cfd, 4096) != 0) _exit(2);
        _exit(q[FILE_SIZE / 2] == 0 ? 0 : 1); /* must not return */
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    /* (a sanitizer's handler, there before ours, reports it and exits) */
    CHECKF(CHECK_SANITIZED ? !(WIFEXITED(ws) && WEXITSTATUS(ws) == 0)
                           : WIFSIGNALED(ws) && WTERMSIG(ws) == SIGBUS,
           "unguarded fault: status %#x", ws);

    /* a SIGBUS sent, not raised by a fault: the default action too */
    pid = fork();
    if (pid == 0) {
        kill(getpid(), SIGBUS);
        _exit(0);
    }
    waitpid(pid, &ws, 0);
    CHECKF(CHECK_SANITIZED ? !(WIFEXITED(ws) && WEXITSTATUS(ws) == 0)
                           : WIFSIGNALED(ws) && WTERMSIG(ws) == SIGBUS,
           "kill -BUS: status %#x", ws);
}

static bool copy_file(const char *from, const char *to) {
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
    return system(cmd) == 0;
}

static cllm_status decode_some(cllm_session *s, const cllm_model *m) {
    int32_t ids[32];
    size_t n = 0;
    const cllm_status st = cllm_tokenize(m, "Once upon a time", 16, true, false, ids, 32, &n);
    if (st != CLLM_OK) return st;
    cllm_session_reset(s);
    return cllm_session_decode(s, ids, (int64_t)n);
}

typedef struct racer {
    cllm_session *s;
    const cllm_model *m;
    _Atomic int stop;
    cllm_status failed;
    int n_ok;
} racer;

static void *race(void *arg) {
    racer *r = arg;
    while (!atomic_load(&r->stop)) {
        const cllm_status st = decode_some(r->s, r->m);
        if (st != CLLM_OK) {
            r->failed = st;
            break;
        }
        r->n_ok++;
    }
    return NULL;
}

/* Loads a fresh copy of `src` as `name`; NULL on failure. */
static cllm_model *load_copy(const char *src, const char *name, bool mmap_it, char *path,
                             size_t size) {
    snprintf(path, size, "%s/%s", g_dir, name);
    CHECK(copy_file(src, path));
    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = mmap_it;
    mp.progress = false;
    cllm_model *m = NULL;
    CHECKF(cllm_model_load(path, &mp, &m) == CLLM_OK, "%s", cllm_last_error());
    return m;
}

static void test_model(void) {
    char src[4096], path[700];
    refs_model_path(src, sizeof(src), "tinyllamas-stories-260k-f32.gguf");
    if (access(src, R_OK) != 0) {
        check_missing(src);
        return;
    }
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 64;

    /* truncated */
    cllm_model *m = load_copy(src, "truncated.gguf", true, path, sizeof(path));
    if (!m) return;
    cllm_session *s = NULL;
    CHECK(cllm_session_new(m, &sp, &s) == CLLM_OK);
    CHECK(decode_some(s, m) == CLLM_OK);
    CHECK(cllm_model_check(m) == CLLM_OK);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && truncate(path, sb.st_size / 2) == 0);
    CHECK(decode_some(s, m) == CLLM_ERR_IO);
    CHECKF(strstr(cllm_last_error(), path) != NULL, "%s", cllm_last_error());
    CHECK(cllm_model_check(m) == CLLM_ERR_IO);
    CHECK(decode_some(s, m) == CLLM_ERR_IO); /* and stays so */
    cllm_session_free(s);
    cllm_model_free(m);

    /* truncated while another thread decodes: an error, never a crash */
    m = load_copy(src, "raced.gguf", true, path, sizeof(path));
    if (!m) return;
    racer r = {.m = m};
    CHECK(cllm_session_new(m, &sp, &r.s) == CLLM_OK);
    pthread_t th;
    const long faults_before = cllm_mapguard_faults();
    CHECK(pthread_create(&th, NULL, race, &r) == 0);
    usleep(50000);
    CHECK(stat(path, &sb) == 0 && truncate(path, 4096) == 0);
    for (int i = 0; i < 500 && !r.failed; i++) usleep(10000);
    atomic_store(&r.stop, 1);
    pthread_join(th, NULL);
    CHECKF(r.failed == CLLM_ERR_IO, "raced: status %d after %d passes", (int)r.failed, r.n_ok);
    printf("raced truncation: %d passes, then an error (%s)\n", r.n_ok,
           cllm_mapguard_faults() > faults_before ? "a fault in the pass" : "seen before a pass");
    cllm_session_free(r.s);
    cllm_model_free(m);

    /* overwritten in place, the same size */
    m = load_copy(src, "overwritten.gguf", true, path, sizeof(path));
    if (!m) return;
    CHECK(cllm_session_new(m, &sp, &s) == CLLM_OK);
    CHECK(decode_some(s, m) == CLLM_OK);
    usleep(20000); /* a modification time after the load's */
    const int fd = open(path, O_WRONLY);
    CHECK(fd >= 0 && stat(path, &sb) == 0);
    char junk[4096];
    memset(junk, 0x7f, sizeof(junk));
    CHECK(pwrite(fd, junk, sizeof(junk), sb.st_size / 2) == (ssize_t)sizeof(junk));
    close(fd);
    CHECK(decode_some(s, m) == CLLM_ERR_IO);
    CHECKF(strstr(cllm_last_error(), "modified") != NULL, "%s", cllm_last_error());
    CHECK(cllm_model_check(m) == CLLM_ERR_IO);
    cllm_session_free(s);
    cllm_model_free(m);

    /* read whole: the file no longer matters */
    m = load_copy(src, "read.gguf", false, path, sizeof(path));
    if (!m) return;
    CHECK(cllm_session_new(m, &sp, &s) == CLLM_OK);
    CHECK(stat(path, &sb) == 0 && truncate(path, 4096) == 0);
    CHECK(decode_some(s, m) == CLLM_OK);
    CHECK(cllm_model_check(m) == CLLM_OK);
    cllm_session_free(s);
    cllm_model_free(m);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof(g_dir), "%s/cllm-test-mapfault-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    cllm_log_set(quiet_log, NULL);
    test_guard();
    test_model();
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) printf("could not remove %s\n", g_dir);
    return check_summary("test_mapfault");
}
