/* A split GGUF file (NAME-00001-of-0000N.gguf ..., as llama.cpp's
 * gguf-split writes it) joined into one file (download.h). */
#include "cllm.h"
#include "commands.h"
#include "download.h"
#include "gguf/gguf.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SPLIT_TAIL "-00001-of-00003.gguf" /* the length of a part's suffix */

bool cli_split_name(const char *f, int *no, int *count) {
    const size_t n = strlen(f), tail = strlen(SPLIT_TAIL);
    if (n < tail) return false;
    const char *t = f + n - tail;
    int a, b;
    char end[8];
    if (sscanf(t, "-%5d-of-%5d%7s", &a, &b, end) != 3 || strcasecmp(end, ".gguf") != 0 || a < 1 ||
        b < 1 || a > b) {
        return false;
    }
    for (int i = 1; i <= 5; i++) {
        if (!isdigit((unsigned char)t[i]) || !isdigit((unsigned char)t[9 + i])) return false;
    }
    *no = a, *count = b;
    return true;
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

/* One part, opened and mapped. */
typedef struct part {
    char *path;
    cllm_gguf *g;
    const uint8_t *map;
    size_t map_len;
} part;

/* An integer key of the split metadata into *v; false (after printing)
 * when it is missing or not an integer. */
static bool split_key(const char *cmd, const part *p, const char *key, int64_t *v) {
    if (cllm_gguf_get_i64(p->g, key, v) != CLLM_OK) {
        cli_error(cmd, "%s: not a part of a split GGUF file: no integer %s", p->path, key);
        return false;
    }
    return true;
}

static bool open_part(const char *cmd, part *p) {
    if (cllm_gguf_open(p->path, &p->g) != CLLM_OK) {
        cli_error(cmd, "%s", cllm_last_error());
        return false;
    }
    const int fd = open(p->path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        cli_error(cmd, "cannot read %s: %s", p->path, strerror(errno));
        if (fd >= 0) close(fd);
        return false;
    }
    if ((uint64_t)st.st_size != cllm_gguf_file_size(p->g)) {
        cli_error(cmd, "%s changed while it was read", p->path);
        close(fd);
        return false;
    }
    if (st.st_size > 0) {
        /* mapped, not read: the writer streams the data from the page cache */
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            cli_error(cmd, "cannot map %s: %s", p->path, strerror(errno));
            close(fd);
            return false;
        }
        p->map = m;
        p->map_len = (size_t)st.st_size;
        (void)madvise(m, p->map_len, MADV_SEQUENTIAL);
    }
    close(fd);
    return true;
}

static const char *const k_split_keys[] = {"split.no", "split.count", "split.tensors.count"};

bool cli_gguf_join(const char *cmd, const char *first, const char *out, bool keep_parts) {
    int no, count;
    if (!cli_split_name(first, &no, &count) || no != 1) {
        cli_error(cmd,
                  "%s is not the first part of a split GGUF file "
                  "(NAME-00001-of-0000N.gguf)",
                  first);
        return false;
    }
    part *parts = calloc((size_t)count, sizeof(*parts));
    cllm_gguf_writer *w = cllm_gguf_writer_new();
    bool ok = false;
    int64_t n_tensors = 0, want = 0;
    if (!parts || !w) {
        cli_error(cmd, "out of memory");
        goto done;
    }
    const size_t digits = strlen(first) - strlen(SPLIT_TAIL) + 1; /* of the part's number */
    for (int k = 0; k < count; k++) {
        part *p = &parts[k];
        if (!(p->path = strdup(first))) {
            cli_error(cmd, "out of memory");
            goto done;
        }
        char num[12];
        snprintf(num, sizeof(num), "%05d", k + 1);
        memcpy(p->path + digits, num, 5);
        if (!open_part(cmd, p)) goto done;
        struct stat ps, os;
        if (!strcmp(p->path, out) || (stat(p->path, &ps) == 0 && stat(out, &os) == 0 &&
                                      ps.st_dev == os.st_dev && ps.st_ino == os.st_ino)) {
            cli_error(cmd, "the joined file cannot be one of its parts (%s)", out);
            goto done;
        }
        int64_t sno, scount;
        if (!split_key(cmd, p, "split.no", &sno) || !split_key(cmd, p, "split.count", &scount)) {
            goto done;
        }
        if (scount != count || sno != k) {
            cli_error(cmd,
                      "%s: split.no %lld (0-based) and split.count %lld, but its name makes it "
                      "part %d of %d",
                      p->path, (long long)sno, (long long)scount, k + 1, count);
            goto done;
        }
        int64_t st_count;
        if (k == 0 && !split_key(cmd, p, "split.tensors.count", &want)) goto done;
        if (k > 0 && cllm_gguf_find_key(p->g, "split.tensors.count") >= 0 &&
            (!split_key(cmd, p, "split.tensors.count", &st_count) || st_count != want)) {
            cli_error(cmd, "%s: split.tensors.count is not the first part's %lld", p->path,
                      (long long)want);
            goto done;
        }
        if (k == 0 && cllm_gguf_writer_copy_kv(w, p->g) != CLLM_OK) {
            cli_error(cmd, "%s", cllm_last_error());
            goto done;
        }
        const int64_t n = cllm_gguf_n_tensors(p->g);
        const uint64_t base = cllm_gguf_data_offset(p->g);
        for (int64_t i = 0; i < n; i++) {
            const cllm_gguf_tensor_info *t = cllm_gguf_tensor(p->g, i);
            /* in the file: the reader checked it */
            const uint8_t *data = p->map + base + t->offset;
            if (cllm_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, data) !=
                CLLM_OK) {
                cli_error(cmd, "%s: %s", p->path, cllm_last_error());
                goto done;
            }
        }
        n_tensors += n;
    }
    if (n_tensors != want) {
        cli_error(cmd, "%s: the parts hold %lld tensors, but split.tensors.count is %lld", first,
                  (long long)n_tensors, (long long)want);
        goto done;
    }
    for (size_t i = 0; i < sizeof(k_split_keys) / sizeof(k_split_keys[0]); i++) {
        cllm_gguf_writer_remove(w, k_split_keys[i]);
    }
    if (cllm_gguf_writer_write(w, out) != CLLM_OK) {
        cli_error(cmd, "%s", cllm_last_error());
        goto done;
    }
    ok = true;
    fprintf(stderr, "cllm %s: joined %d parts (%lld tensors) into %s", cmd, count,
            (long long)n_tensors, out);
    if (keep_parts) {
        fprintf(stderr, "; the parts are kept\n");
    } else {
        fprintf(stderr, "; the parts are removed\n");
        for (int k = 0; k < count; k++) {
            if (unlink(parts[k].path) != 0 && errno != ENOENT) {
                cli_warn(cmd, "cannot remove %s: %s", parts[k].path, strerror(errno));
            }
        }
    }
done:
    for (int k = 0; parts && k < count; k++) {
        if (parts[k].map) munmap((void *)parts[k].map, parts[k].map_len);
        cllm_gguf_free(parts[k].g);
        free(parts[k].path);
    }
    free(parts);
    cllm_gguf_writer_free(w);
    return ok;
}
