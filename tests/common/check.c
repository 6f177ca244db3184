#include "common/check.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int g_checks_passed;
int g_checks_failed;

#define MAX_MISSING 32

static char *g_missing[MAX_MISSING];
static int g_n_missing;

void check_missing(const char *what) {
    if (g_n_missing < MAX_MISSING) g_missing[g_n_missing++] = strdup(what);
}

int check_summary(const char *name) {
    printf("%s: %d passed, %d failed\n", name, g_checks_passed, g_checks_failed);
    if (g_n_missing == 0) return g_checks_failed == 0 ? 0 : 1;
    const char *req = getenv("CLLM_REQUIRE_TEST_DATA");
    const bool required = req && *req && strcmp(req, "0") != 0;
    printf("%s: %s: missing test data:\n", name,
           required ? "FAILED (CLLM_REQUIRE_TEST_DATA is set)" : "skipped");
    for (int i = 0; i < g_n_missing; i++) {
        printf("  %s\n", g_missing[i] ? g_missing[i] : "(out of memory)");
        free(g_missing[i]);
    }
    g_n_missing = 0;
    if (g_checks_failed > 0 || required) return 1;
    return CHECK_SKIP;
}

/* Under AddressSanitizer, let failed huge allocations return NULL like the
 * real allocator does, so the tests can exercise the error paths. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

bool check_aborts_with(void (*fn)(void), const char *needle) {
    int fds[2];
    if (pipe(fds) != 0) return false;
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        fn();
        _exit(0);
    }
    close(fds[1]);
    char buf[1024] = {0};
    size_t n = 0;
    ssize_t r;
    while (n < sizeof(buf) - 1 && (r = read(fds[0], buf + n, sizeof(buf) - 1 - n)) > 0)
        n += (size_t)r;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(buf, needle) != NULL;
}
