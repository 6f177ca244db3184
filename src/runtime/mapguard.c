/* SIGBUS in a mapped model file (mapguard.h). */
#include "runtime/mapguard.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A slot is claimed (state 1), filled, then published (state 2); the
 * handler reads only published slots. Plain atomics: the handler takes no
 * lock. */
typedef struct guard {
    _Atomic int state; /* 0 free, 1 being filled or emptied, 2 guarded */
    _Atomic uintptr_t lo, hi;
    _Atomic(_Atomic int *) faulted;
} guard;

static guard g_guards[CLLM_MAPGUARD_MAX];
static struct sigaction g_prev; /* the handler before ours */
static uintptr_t g_page;
static atomic_long g_faults;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_install_err;

/* Maps zero pages from the faulting page to the end of its guarded range. */
static bool absorb(uintptr_t addr) {
    for (int i = 0; i < CLLM_MAPGUARD_MAX; i++) {
        guard *g = &g_guards[i];
        if (atomic_load(&g->state) != 2) continue;
        const uintptr_t lo = atomic_load(&g->lo), hi = atomic_load(&g->hi);
        if (addr < lo || addr >= hi) continue;
        const uintptr_t page = addr & ~(g_page - 1);
        void *p = mmap((void *)page, hi - page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                       -1, 0);
        if (p == MAP_FAILED) return false;
        _Atomic int *flag = atomic_load(&g->faulted);
        if (flag) atomic_store(flag, 1);
        atomic_fetch_add(&g_faults, 1);
        return true;
    }
    return false;
}

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    const int saved = errno;
    /* si_code > 0: raised by the kernel for an access (not kill/raise) */
    if (si && si->si_code > 0 && absorb((uintptr_t)si->si_addr)) {
        errno = saved;
        return;
    }
    errno = saved;
    if ((g_prev.sa_flags & SA_SIGINFO) && g_prev.sa_sigaction) {
        g_prev.sa_sigaction(sig, si, uc);
        return;
    }
    if (g_prev.sa_handler != SIG_DFL && g_prev.sa_handler != SIG_IGN) {
        g_prev.sa_handler(sig);
        return;
    }
    /* as without us: the default action once this handler returns */
    signal(SIGBUS, SIG_DFL);
    raise(SIGBUS);
}

static void install(void) {
    g_page = (uintptr_t)sysconf(_SC_PAGESIZE);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &g_prev) != 0) g_install_err = errno ? errno : EINVAL;
}

cllm_status cllm_mapguard_add(void *addr, size_t size, _Atomic int *faulted) {
    if (!addr || !size) return CLLM_OK;
    pthread_once(&g_once, install);
    if (g_install_err) {
        return cllm_error(CLLM_ERR_BACKEND, "cannot handle SIGBUS of mapped weights: %s",
                          strerror(g_install_err));
    }
    for (int i = 0; i < CLLM_MAPGUARD_MAX; i++) {
        guard *g = &g_guards[i];
        int expect = 0;
        if (!atomic_compare_exchange_strong(&g->state, &expect, 1)) continue;
        atomic_store(&g->lo, (uintptr_t)addr);
        atomic_store(&g->hi, (uintptr_t)addr + size);
        atomic_store(&g->faulted, faulted);
        atomic_store(&g->state, 2);
        return CLLM_OK;
    }
    return cllm_error(CLLM_ERR_TOO_LARGE, "more than %d mapped model files at once",
                      CLLM_MAPGUARD_MAX);
}

void cllm_mapguard_remove(void *addr) {
    if (!addr) return;
    for (int i = 0; i < CLLM_MAPGUARD_MAX; i++) {
        guard *g = &g_guards[i];
        int expect = 2;
        if (atomic_load(&g->lo) != (uintptr_t)addr) continue;
        if (!atomic_compare_exchange_strong(&g->state, &expect, 1)) continue;
        atomic_store(&g->faulted, NULL);
        atomic_store(&g->lo, 0);
        atomic_store(&g->hi, 0);
        atomic_store(&g->state, 0);
        return;
    }
}

long cllm_mapguard_faults(void) { return atomic_load(&g_faults); }
