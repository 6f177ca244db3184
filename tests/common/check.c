#include "common/check.h"

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
