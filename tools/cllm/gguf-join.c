/* A split GGUF file (NAME-00001-of-0000N.gguf ..., as llama.cpp's
 * gguf-split writes it) joined into one file (download.h), by the
 * library's cllm_gguf_join. */
#include "cllm.h"
#include "commands.h"
#include "download.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SPLIT_TAIL "-00001-of-00003.gguf" /* the length of a part's suffix */

bool cli_split_name(const char *f, int *no, int *count) {
    return cllm_gguf_split_name(f, no, count);
}

char *cli_split_joined_name(const char *first) {
    int no, count;
    if (!cli_split_name(first, &no, &count)) return NULL;
    const size_t stem = strlen(first) - strlen(SPLIT_TAIL);
    char *out = malloc(stem + sizeof(".gguf"));
    if (!out) return NULL;
    memcpy(out, first, stem);
    memcpy(out + stem, first + strlen(first) - strlen(".gguf"), sizeof(".gguf"));
    return out;
}

bool cli_gguf_join(const char *cmd, const char *first, const char *out, bool keep_parts) {
    int count = 0;
    int64_t n_tensors = 0;
    if (cllm_gguf_join(first, out, &count, &n_tensors) != CLLM_OK) {
        cli_error(cmd, "%s", cllm_last_error());
        return false;
    }
    fprintf(stderr, "cllm %s: joined %d parts (%lld tensors) into %s", cmd, count,
            (long long)n_tensors, out);
    if (keep_parts) {
        fprintf(stderr, "; the parts are kept\n");
        return true;
    }
    fprintf(stderr, "; the parts are removed\n");
    for (int k = 1; k <= count; k++) {
        char path[4096];
        if (cllm_gguf_split_part(first, k, path, sizeof(path)) != CLLM_OK) {
            cli_warn(cmd, "%s", cllm_last_error());
            continue;
        }
        if (unlink(path) != 0 && errno != ENOENT) {
            cli_warn(cmd, "cannot remove %s: %s", path, strerror(errno));
        }
    }
    return true;
}
