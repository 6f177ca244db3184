/* The memory cgroups' limits on the process (memlimit.h). */
#include "backend/cpu/memlimit.h"
#include "core/common.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* v1 writes "no limit" as a huge number (PAGE_COUNTER_MAX pages) */
#define V1_UNLIMITED ((uint64_t)1 << 60)

/* The number in dir/name: false when missing or malformed, *none for "max". */
static bool read_value(const char *dir, const char *name, uint64_t *v, bool *none) {
    char path[PATH_MAX + 64], buf[64];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    const bool got = fgets(buf, sizeof(buf), f) != NULL;
    fclose(f);
    if (!got) return false;
    *none = !strncmp(buf, "max", 3);
    if (*none) return true;
    char *end;
    *v = strtoull(buf, &end, 10);
    return end != buf;
}

/* The value of `key` in dir/memory.stat, or 0. */
static uint64_t stat_value(const char *dir, const char *key) {
    char path[PATH_MAX + 64], line[256];
    snprintf(path, sizeof(path), "%s/memory.stat", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    uint64_t v = 0;
    const size_t n = strlen(key);
    while (fgets(line, sizeof(line), f)) {
        if (!strncmp(line, key, n) && line[n] == ' ') {
            v = strtoull(line + n + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

static bool is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

typedef struct limits {
    bool found;
    uint64_t limit, avail;
} limits;

/* One cgroup's limit and what is left under it, folded into *l. */
static void level(const char *dir, bool v2, limits *l) {
    uint64_t lim = UINT64_MAX, v = 0, used = 0;
    bool none = false;
    if (v2) {
        if (read_value(dir, "memory.max", &v, &none) && !none) lim = v;
        if (read_value(dir, "memory.high", &v, &none) && !none) lim = CLLM_MIN(lim, v);
    } else if (read_value(dir, "memory.limit_in_bytes", &v, &none) && !none && v < V1_UNLIMITED) {
        lim = v;
    }
    if (lim == UINT64_MAX) return;
    if (!read_value(dir, v2 ? "memory.current" : "memory.usage_in_bytes", &used, &none) || none) {
        used = 0; /* a limit without its usage: the limit alone */
    }
    /* file cache the cgroup would drop before it runs out */
    uint64_t cache = stat_value(dir, v2 ? "inactive_file" : "total_inactive_file");
    if (!v2 && !cache) cache = stat_value(dir, "inactive_file");
    const uint64_t held = used - CLLM_MIN(cache, used);
    const uint64_t left = lim > held ? lim - held : 0;
    l->limit = l->found ? CLLM_MIN(l->limit, lim) : lim;
    l->avail = l->found ? CLLM_MIN(l->avail, left) : left;
    l->found = true;
}

/* The cgroup at `rel` (a path of /proc/self/cgroup) in the hierarchy
 * mounted at `base`, and every one above it. A container that sees only its
 * own part of the hierarchy mounted at `base` (no cgroup namespace) has
 * leading components of `rel` that are not there: they are dropped. */
static void walk(const char *base, const char *rel, bool v2, limits *l) {
    char dir[PATH_MAX];
    while (*rel == '/') rel++;
    for (;;) {
        snprintf(dir, sizeof(dir), *rel ? "%s/%s" : "%s%s", base, rel);
        if (!*rel || is_dir(dir)) break;
        const char *next = strchr(rel, '/');
        rel = next ? next + 1 : "";
    }
    const size_t base_len = strlen(base);
    for (;;) {
        level(dir, v2, l);
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= base_len || !slash || (size_t)(slash - dir) < base_len) break;
        *slash = '\0';
    }
}

/* Whether `list` (comma-separated) names `name`. */
static bool lists(const char *list, size_t len, const char *name) {
    const size_t n = strlen(name);
    for (size_t i = 0; i + n <= len; i++) {
        if ((i == 0 || list[i - 1] == ',') && !strncmp(list + i, name, n) &&
            (i + n == len || list[i + n] == ',')) {
            return true;
        }
    }
    return false;
}

bool cllm_cgroup_memory(size_t *limit, size_t *avail) {
    const char *env = getenv("CLLM_CGROUP_ROOT");
    const char *root = env && *env ? env : "/sys/fs/cgroup";
    char self[PATH_MAX], path[PATH_MAX + 64];
    if (env && *env) {
        snprintf(self, sizeof(self), "%s/proc-self-cgroup", root);
    } else {
        snprintf(self, sizeof(self), "/proc/self/cgroup");
    }
    FILE *f = fopen(self, "r");
    if (!f) return false;
    limits l = {0};
    char line[PATH_MAX + 128];
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        const char *rel = c2 + 1;
        if (c2 == c1 + 1 && !strncmp(line, "0:", 2)) { /* v2: "0::/path" */
            snprintf(path, sizeof(path), "%s/cgroup.controllers", root);
            struct stat sb;
            if (stat(path, &sb) == 0) {
                walk(root, rel, true, &l);
            } else {
                snprintf(path, sizeof(path), "%s/unified", root);
                if (is_dir(path)) walk(path, rel, true, &l);
            }
        } else if (lists(c1 + 1, (size_t)(c2 - c1 - 1), "memory")) { /* v1 */
            snprintf(path, sizeof(path), "%s/memory", root);
            if (is_dir(path)) walk(path, rel, false, &l);
        }
    }
    fclose(f);
    if (!l.found) return false;
    *limit = l.limit > SIZE_MAX ? SIZE_MAX : (size_t)l.limit;
    *avail = CLLM_MIN((size_t)CLLM_MIN(l.avail, (uint64_t)SIZE_MAX), *limit);
    return true;
}
