/* cllm info -m FILE: the metadata and the tensor table of a GGUF file. */
#include "commands.h"
#include "gguf/gguf.h"

#include <stdio.h>
#include <string.h>

static void print_value(const cllm_gguf *g, int64_t i) {
    switch (cllm_gguf_kv_type(g, i)) {
    case CLLM_GGUF_UINT8: printf("%u", cllm_gguf_val_u8(g, i)); break;
    case CLLM_GGUF_INT8: printf("%d", cllm_gguf_val_i8(g, i)); break;
    case CLLM_GGUF_UINT16: printf("%u", cllm_gguf_val_u16(g, i)); break;
    case CLLM_GGUF_INT16: printf("%d", cllm_gguf_val_i16(g, i)); break;
    case CLLM_GGUF_UINT32: printf("%u", cllm_gguf_val_u32(g, i)); break;
    case CLLM_GGUF_INT32: printf("%d", cllm_gguf_val_i32(g, i)); break;
    case CLLM_GGUF_UINT64: printf("%llu", (unsigned long long)cllm_gguf_val_u64(g, i)); break;
    case CLLM_GGUF_INT64: printf("%lld", (long long)cllm_gguf_val_i64(g, i)); break;
    case CLLM_GGUF_FLOAT32: printf("%g", (double)cllm_gguf_val_f32(g, i)); break;
    case CLLM_GGUF_FLOAT64: printf("%g", cllm_gguf_val_f64(g, i)); break;
    case CLLM_GGUF_BOOL: printf("%s", cllm_gguf_val_bool(g, i) ? "true" : "false"); break;
    case CLLM_GGUF_STRING: {
        const char *s = cllm_gguf_val_str(g, i);
        const size_t n = strlen(s);
        printf("\"%.*s%s\"", (int)CLLM_MIN(n, 72), s, n > 72 ? "..." : "");
        break;
    }
    case CLLM_GGUF_ARRAY:
        printf("[%s x %llu]", cllm_gguf_type_name(cllm_gguf_arr_type(g, i)),
               (unsigned long long)cllm_gguf_arr_n(g, i));
        break;
    default: printf("?"); break;
    }
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
        const cllm_gguf_tensor_info *t = cllm_gguf_tensor(g, i);
        char shape[64];
        int n = snprintf(shape, sizeof(shape), "[");
        for (int d = 0; d < t->n_dims; d++) {
            n += snprintf(shape + n, sizeof(shape) - (size_t)n, d ? ", %lld" : "%lld",
                          (long long)t->ne[d]);
        }
        snprintf(shape + n, sizeof(shape) - (size_t)n, "]");
        printf("  %-5lld %-36s %-8s %-28s %12zu\n", (long long)i, t->name, cllm_type_name(t->type),
               shape, t->size);
        total += t->size;
    }
    printf("\n  total tensor bytes: %llu\n", (unsigned long long)total);
    cllm_gguf_free(g);
    return 0;
}
