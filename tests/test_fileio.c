/*
 * Files replaced whole or not at all (cllm_file_write, core/fileio.h): a
 * new file and a replaced one (mode kept, a link followed, a FIFO refused);
 * a write cut by the file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) and
 * by a full file system (a 64 KiB tmpfs, where one can be mounted) leaves
 * the old file and no temporary file; a writer killed (SIGKILL) at random
 * moments leaves one whole version, never a mix or a truncated file.
 */
#include "common/check.h"
#include "core/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_dir[512];

static void quiet_log(cllm_log_level level, const char *msg, void *user_data) {
    (void)level, (void)msg, (void)user_data;
}

static char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    *size = n;
    return buf;
}

static bool has_content(const char *path, const char *want) {
    size_t n = 0;
    char *got = read_file(path, &n);
    const bool ok = got && n == strlen(want) && !memcmp(got, want, n);
    free(got);
    return ok;
}

/* Entries of `dir` other than . and .. */
static int n_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static void test_replace(void) {
    char path[600], link_path[600], fifo[600];
    snprintf(path, sizeof(path), "%s/a.json", g_dir);
    CHECK(cllm_file_write(path, "first", 5) == CLLM_OK);
    CHECK(has_content(path, "first"));
    const mode_t um = umask(022);
    umask(um);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == (0666 & ~um));
    CHECK(chmod(path, 0640) == 0);
    CHECK(cllm_file_write(path, "second", 6) == CLLM_OK);
    CHECK(has_content(path, "second"));
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0640);
    CHECK(cllm_file_write(path, NULL, 0) == CLLM_OK);
    CHECK(has_content(path, ""));
    CHECK(cllm_file_write(path, NULL, 3) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_file_write("", "x", 1) == CLLM_ERR_INVALID_ARG);

    /* a link: the file it names is replaced, the link stays */
    snprintf(link_path, sizeof(link_path), "%s/link.json", g_dir);
    CHECK(symlink("a.json", link_path) == 0);
    CHECK(cllm_file_write(link_path, "third", 5) == CLLM_OK);
    CHECK(lstat(link_path, &sb) == 0 && S_ISLNK(sb.st_mode));
    CHECK(has_content(path, "third"));
    unlink(link_path);

    /* not a regular file: refused, left as it is */
    snprintf(fifo, sizeof(fifo), "%s/fifo", g_dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK(cllm_file_write(fifo, "x", 1) == CLLM_ERR_IO);
    CHECKF(strstr(cllm_last_error(), "not a regular file") != NULL, "%s", cllm_last_error());
    CHECK(stat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode));
    unlink(fifo);

    /* a folder that does not exist: the error names the file */
    char bad[700];
    snprintf(bad, sizeof(bad), "%s/nodir/x.json", g_dir);
    CHECK(cllm_file_write(bad, "x", 1) == CLLM_ERR_IO);
    CHECKF(strstr(cllm_last_error(), bad) && strstr(cllm_last_error(), strerror(ENOENT)), "%s",
           cllm_last_error());
    CHECK_EQ_INT(n_entries(g_dir), 1);
    unlink(path);
}

/* A write that fails part-way: the old file, whole; nothing else left. */
static void check_cut(const char *dir, const char *what, int want_errno) {
    char path[600];
    snprintf(path, sizeof(path), "%s/save.json", dir);
    CHECK(cllm_file_write(path, "{\"old\": true}", 13) == CLLM_OK);
    const size_t big = (size_t)1 << 20;
    char *data = malloc(big);
    memset(data, 'x', big);
    const cllm_status st = cllm_file_write(path, data, big);
    free(data);
    CHECKF(st == CLLM_ERR_IO, "%s: status %d", what, (int)st);
    CHECKF(strstr(cllm_last_error(), path) && strstr(cllm_last_error(), strerror(want_errno)),
           "%s: %s", what, cllm_last_error());
    CHECKF(has_content(path, "{\"old\": true}"), "%s: the old file changed", what);
    CHECKF(n_entries(dir) == 1, "%s: %d entries left", what, n_entries(dir));
    unlink(path);
}

static void test_fsize_limit(void) {
    struct rlimit old;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = old;
    lim.rlim_cur = 64 * 1024;
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    check_cut(g_dir, "file-size limit", EFBIG);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
}

static void test_full_disk(void) {
    char dir[600];
    snprintf(dir, sizeof(dir), "%s/tmpfs", g_dir);
    CHECK(mkdir(dir, 0700) == 0);
    if (mount("cllm-test", dir, "tmpfs", 0, "size=64k") != 0) {
        printf("full disk: cannot mount a tmpfs here (%s): not checked\n", strerror(errno));
    } else {
        check_cut(dir, "full tmpfs", ENOSPC);
        CHECK(umount(dir) == 0);
    }
    rmdir(dir);
}

/* A child replaces the file with versions of 4 MiB, each all one letter,
 * until killed: the file is always one whole version. */
static void test_kill(void) {
    char path[600];
    snprintf(path, sizeof(path), "%s/kill.bin", g_dir);
    const size_t size = (size_t)4 << 20;
    char *data = malloc(size);
    memset(data, 'a', size);
    CHECK(cllm_file_write(path, data, size) == CLLM_OK);
    srand((unsigned)time(NULL));
    int n_bad = 0;
    for (int round = 0; round < 8; round++) {
        const pid_t pid = fork();
        if (pid == 0) {
            for (int v = 0;; v++) {
                memset(data, 'a' + v % 26, size);
                (void)cllm_file_write(path, data, size);
            }
        }
        usleep((useconds_t)(1000 + rand() % 40000));
        kill(pid, SIGKILL);
        int ws;
        waitpid(pid, &ws, 0);
        size_t n = 0;
        char *got = read_file(path, &n);
        bool whole = got && n == size;
        for (size_t i = 1; whole && i < n; i++) whole = got[i] == got[0];
        n_bad += !whole;
        free(got);
    }
    CHECKF(n_bad == 0, "%d of 8 kills left a partial file", n_bad);
    free(data);
    /* the killed writer's temporary files remain (nothing can remove them) */
    DIR *d = opendir(g_dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strncmp(e->d_name, "kill.bin.tmp", 12)) {
            char p[900];
            snprintf(p, sizeof(p), "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
    }
    if (d) closedir(d);
    unlink(path);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof(g_dir), "%s/cllm-test-fileio-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    cllm_log_set(quiet_log, NULL); /* the errors expected */
    test_replace();
    test_fsize_limit();
    test_full_disk();
    test_kill();
    rmdir(g_dir);
    return check_summary("test_fileio");
}
