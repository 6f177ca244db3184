#include "common/check.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int g_checks_passed;
int g_checks_failed;

int check_summary(const char *name) {
    printf("%s: %d passed, %d failed\n", name, g_checks_passed, g_checks_failed);
    return g_checks_failed == 0 ? 0 : 1;
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
