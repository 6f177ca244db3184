/* cllm info -m FILE: the metadata and the tensor table of a GGUF file. */
#include "cllm.h"
#include "commands.h"

#include <stdio.h>
#include <string.h>

/* A metadata value on one line: strings quoted and cut at 72 bytes. */
static void print_value(const cllm_gguf *g, int64_t i) {
    char buf[80];
    const size_t n = cllm_gguf_val_to_str(g, i, buf, sizeof(buf));
    if (strcmp(cllm_gguf_kv_type_str(g, i), "string") != 0) {
        printf("%s", buf);
        return;
    }
    printf("\"%.*s%s\"", (int)(n < 72 ? n : 72), buf, n > 72 ? "..." : "");
}

int cllm_cmd_info(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) {
            path = argv[++i];
        } else {
            fprintf(stderr, "cllm info: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "cllm info: no model given (-m FILE)\n");
        return 2;
    }
    cllm_gguf *g = NULL;
    if (cllm_gguf_open(path, &g) != CLLM_OK) {
        fprintf(stderr, "cllm: %s\n", cllm_last_error());
        return 1;
    }
    printf("file: %s\nGGUF version %u, %lld tensors, %lld keys, alignment %zu, data at %llu\n\n",
           path, cllm_gguf_version(g), (long long)cllm_gguf_n_tensors(g),
           (long long)cllm_gguf_n_kv(g), cllm_gguf_alignment(g),
           (unsigned long long)cllm_gguf_data_offset(g));
    for (int64_t i = 0; i < cllm_gguf_n_kv(g); i++) {
        printf("  %-44s = ", cllm_gguf_key(g, i));
        print_value(g, i);
        putchar('\n');
    }
    printf("\n  %-5s %-36s %-8s %-28s %12s\n", "#", "tensor", "type", "shape", "bytes");
    uint64_t total = 0;
    for (int64_t i = 0; i < cllm_gguf_n_tensors(g); i++) {
        const cllm_tensor_desc t = cllm_gguf_tensor_desc(g, i);
        char shape[64];
        int n = snprintf(shape, sizeof(shape), "[");
        for (int d = 0; d < t.n_dims; d++) {
            n += snprintf(shape + n, sizeof(shape) - (size_t)n, d ? ", %lld" : "%lld",
                          (long long)t.ne[d]);
        }
        snprintf(shape + n, sizeof(shape) - (size_t)n, "]");
        printf("  %-5lld %-36s %-8s %-28s %12zu\n", (long long)i, t.name, cllm_type_name(t.type),
               shape, t.bytes);
        total += t.bytes;
    }
    printf("\n  total tensor bytes: %llu\n", (unsigned long long)total);
    cllm_gguf_free(g);
    return 0;
}
