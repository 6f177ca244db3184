/* Byte sizes from text (common.h: cllm_parse_size) and as text (cllm.h:
 * cllm_format_size). */
#include "core/common.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

bool cllm_parse_size(const char *s, size_t *out) {
    if (!s || !*s || *s == '-' || *s == '+' || isspace((unsigned char)*s)) return false;
    char *end;
    errno = 0;
    const double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0) return false;
    double mul = 1;
    static const struct {
        const char *suffix;
        double mul;
    } k_units[] = {
        {"", 1},
        {"B", 1},
        {"K", 1024.0},
        {"KB", 1024.0},
        {"KiB", 1024.0},
        {"M", 1048576.0},
        {"MB", 1048576.0},
        {"MiB", 1048576.0},
        {"G", 1073741824.0},
        {"GB", 1073741824.0},
        {"GiB", 1073741824.0},
        {"T", 1099511627776.0},
        {"TB", 1099511627776.0},
        {"TiB", 1099511627776.0},
    };
    bool found = false;
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(k_units) && !found; i++) {
        if (strcasecmp(end, k_units[i].suffix) == 0) {
            mul = k_units[i].mul;
            found = true;
        }
    }
    if (!found) return false;
    const double bytes = floor(v * mul);
    if (bytes >= 18446744073709551616.0) return false;
    *out = (size_t)bytes;
    return true;
}

const char *cllm_format_size(size_t bytes, char *buf, size_t size) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) v /= 1024.0, u++;
    if (!buf || size == 0) return NULL;
    if (u == 0) {
        snprintf(buf, size, "%zu B", bytes);
    } else {
        snprintf(buf, size, "%.2f %s", v, units[u]);
    }
    return buf;
}
