/* cllm info -m FILE: the metadata and the tensor table of a GGUF file. */
#include "cllm.h"
#include "commands.h"
#include "download.h"

#include <stdio.h>
#include <string.h>

static void info_usage(FILE *f) {
    fprintf(f, "usage: cllm info -m FILE\n"
               "\n"
               "Prints the metadata (keys and values; strings cut at 72 characters) and the\n"
               "tensor table of a GGUF file, of any architecture. Strings of the file are\n"
               "printed escaped (see cllm --help).\n"
               "\n"
               "  -m FILE      the file\n"
               "  -hf USER/NAME[:QUANT]\n"
               "               instead of -m: a model of the Hugging Face hub,\n"
               "               downloaded when needed (cllm pull --help)\n"
               "  -h, --help   this help\n");
}

/* `len` bytes of s, escaped, then spaces up to `width` columns. */
static void print_padded(const char *s, size_t len, int width) {
    const size_t n = cllm_escape(NULL, 0, s, len, CLLM_ESCAPE_TEXT);
    cllm_escape_fputs(stdout, s, len, CLLM_ESCAPE_TEXT);
    for (size_t i = n; i < (size_t)width; i++) putchar(' ');
}

/* A metadata value on one line: strings quoted, escaped, cut at 72 bytes. */
static void print_value(const cllm_gguf *g, int64_t i) {
    char buf[80];
    const size_t n = cllm_gguf_val_to_str(g, i, buf, sizeof(buf));
    if (strcmp(cllm_gguf_kv_type_str(g, i), "string") != 0) {
        printf("%s", buf);
        return;
    }
    char esc[73]; /* whole escapes and characters only */
    const size_t have = n < sizeof(buf) - 1 ? n : sizeof(buf) - 1;
    const size_t m = cllm_escape(esc, sizeof(esc), buf, have, CLLM_ESCAPE_TEXT);
    printf("\"%s%s\"", esc, n > have || m >= sizeof(esc) ? "..." : "");
}

int cli_cmd_info(int argc, char **argv) {
    const char *path = NULL, *hf = NULL;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            info_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
            if (!(path = cli_value("info", argc, argv, &i))) return 2;
        } else if (cli_is_hf_option(argv[i])) {
            if (!(hf = cli_value("info", argc, argv, &i))) return 2;
        } else {
            cli_error("info", "unknown option '%s' (see cllm info --help)", argv[i]);
            return 2;
        }
    }
    const int mr = cli_model_arg("info", hf, &path);
    if (mr != 0) return mr;
    cllm_gguf *g = NULL;
    if (cllm_gguf_open(path, &g) != CLLM_OK) {
        cli_lib_error("info");
        return 1;
    }
    printf("file: ");
    cllm_escape_fputs(stdout, path, strlen(path), CLLM_ESCAPE_TEXT);
    printf("\nGGUF version %u, %lld tensors, %lld keys, alignment %zu, data at %llu\n\n",
           cllm_gguf_version(g), (long long)cllm_gguf_n_tensors(g), (long long)cllm_gguf_n_kv(g),
           cllm_gguf_alignment(g), (unsigned long long)cllm_gguf_data_offset(g));
    for (int64_t i = 0; i < cllm_gguf_n_kv(g); i++) {
        const char *key = cllm_gguf_key(g, i);
        printf("  ");
        print_padded(key, strlen(key), 44);
        printf(" = ");
        print_value(g, i);
        putchar('\n');
    }
    printf("\n  %-5s %-36s %-8s %-28s %12s\n", "#", "tensor", "type", "shape", "bytes");
    uint64_t total = 0;
    for (int64_t i = 0; i < cllm_gguf_n_tensors(g); i++) {
        const cllm_tensor_desc t = cllm_gguf_tensor_desc(g, i);
        char shape[128]; /* 4 dims of 20 digits at most */
        int n = snprintf(shape, sizeof(shape), "[");
        for (int d = 0; d < t.n_dims; d++) {
            n += snprintf(shape + n, sizeof(shape) - (size_t)n, d ? ", %lld" : "%lld",
                          (long long)t.ne[d]);
        }
        snprintf(shape + n, sizeof(shape) - (size_t)n, "]");
        printf("  %-5lld ", (long long)i);
        print_padded(t.name, strlen(t.name), 36);
        printf(" %-8s %-28s %12zu\n", cllm_type_name(t.type), shape, t.bytes);
        total += t.bytes;
    }
    printf("\n  total tensor bytes: %llu\n", (unsigned long long)total);
    cllm_gguf_free(g);
    return 0;
}
