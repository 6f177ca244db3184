#include "common/check.h"

int g_checks_passed;
int g_checks_failed;

int check_summary(const char *name) {
    printf("%s: %d passed, %d failed\n", name, g_checks_passed, g_checks_failed);
    return g_checks_failed == 0 ? 0 : 1;
}
