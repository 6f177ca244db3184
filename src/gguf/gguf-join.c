/* A split GGUF file (NAME-00001-of-0000N.gguf ..., as llama.cpp's
 * gguf-split writes it) joined into one file (cllm.h: cllm_gguf_join). */
#include "core/common.h"
#include "core/hostmem.h"
#include "gguf/gguf.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SPLIT_TAIL "-00001-of-00003.gguf" /* the length of a part's suffix */

bool cllm_gguf_split_name(const char *path, int *no, int *count) {
    if (!path || !no || !count) return false;
    const size_t n = strlen(path), tail = strlen(SPLIT_TAIL);
    if (n < tail) return false;
    const char *t = path + n - tail;
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

cllm_status cllm_gguf_split_part(const char *first, int k, char *buf, size_t size) {
    if (!first) return CLLM_NULL_ARG("first");
    if (!buf) return CLLM_NULL_ARG("buf");
    int no, count;
    if (!cllm_gguf_split_name(first, &no, &count) || no != 1 || k < 1 || k > count) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "%s: not the first part of a split GGUF file with a part %d", first, k);
    }
    const size_t n = strlen(first);
    if (n + 1 > size) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "%s: the name does not fit %zu bytes", first, size);
    }
    memcpy(buf, first, n + 1);
    char num[12];
    snprintf(num, sizeof(num), "%05d", k);
    memcpy(buf + n - strlen(SPLIT_TAIL) + 1, num, 5);
    return CLLM_OK;
}

/* One part, opened and mapped. */
typedef struct part {
    char path[4096];
    cllm_gguf *g;
    const uint8_t *map;
    size_t map_len;
} part;

/* An integer key of the split metadata into *v. */
static cllm_status split_key(const part *p, const char *key, int64_t *v) {
    if (cllm_gguf_get_i64(p->g, key, v) != CLLM_OK) {
        return cllm_error(CLLM_ERR_FORMAT, "%s: not a part of a split GGUF file: no integer %s",
                          p->path, key);
    }
    return CLLM_OK;
}

static cllm_status open_part(part *p) {
    cllm_status st = cllm_gguf_open(p->path, &p->g);
    if (st != CLLM_OK) return st;
    const int fd = open(p->path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        st = cllm_error(CLLM_ERR_IO, "cannot read %s: %s", p->path, strerror(errno));
        if (fd >= 0) close(fd);
        return st;
    }
    if ((uint64_t)sb.st_size != cllm_gguf_file_size(p->g)) {
        close(fd);
        return cllm_error(CLLM_ERR_IO, "%s changed while it was read", p->path);
    }
    if (sb.st_size > 0) {
        /* mapped, not read: the writer copies the data from the page cache */
        void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            st = cllm_error(CLLM_ERR_IO, "cannot map %s: %s", p->path, strerror(errno));
            close(fd);
            return st;
        }
        p->map = m;
        p->map_len = (size_t)sb.st_size;
        (void)madvise(m, p->map_len, MADV_SEQUENTIAL);
    }
    close(fd);
    return CLLM_OK;
}

static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return !strcmp(a, b) || (stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
                             sa.st_ino == sb.st_ino);
}

/* Part k (0-based) of `count`: its split keys as its name says, and its
 * tensors added to w (its metadata too, for the first). */
static cllm_status add_part(cllm_gguf_writer *w, const part *p, int k, int count, int64_t *want,
                            int64_t *n_tensors) {
    int64_t sno, scount, n;
    cllm_status st;
    if ((st = split_key(p, "split.no", &sno)) != CLLM_OK) return st;
    if ((st = split_key(p, "split.count", &scount)) != CLLM_OK) return st;
    if (scount != count || sno != k) {
        return cllm_error(CLLM_ERR_FORMAT,
                          "%s: split.no %lld (0-based) and split.count %lld, but its name makes "
                          "it part %d of %d",
                          p->path, (long long)sno, (long long)scount, k + 1, count);
    }
    if (k == 0) {
        if ((st = split_key(p, "split.tensors.count", want)) != CLLM_OK) return st;
        if ((st = cllm_gguf_writer_copy_kv(w, p->g)) != CLLM_OK) return st;
    } else if (cllm_gguf_find_key(p->g, "split.tensors.count") >= 0 &&
               (split_key(p, "split.tensors.count", &n) != CLLM_OK || n != *want)) {
        return cllm_error(CLLM_ERR_FORMAT, "%s: split.tensors.count is not the first part's %lld",
                          p->path, (long long)*want);
    }
    n = cllm_gguf_n_tensors(p->g);
    const uint64_t base = cllm_gguf_data_offset(p->g);
    for (int64_t i = 0; i < n; i++) {
        const cllm_gguf_tensor_info *t = cllm_gguf_tensor(p->g, i);
        /* within the file: the reader checked it */
        const uint8_t *data = p->map + base + t->offset;
        st = cllm_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, data);
        if (st != CLLM_OK) {
            char why[512]; /* the message, before cllm_error writes over it */
            snprintf(why, sizeof(why), "%s", cllm_last_error());
            return cllm_error(st, "%s: %s", p->path, why);
        }
    }
    *n_tensors += n;
    return CLLM_OK;
}

cllm_status cllm_gguf_join(const char *first, const char *out, int *n_parts, int64_t *n_tensors) {
    if (!first) return CLLM_NULL_ARG("first");
    if (!out) return CLLM_NULL_ARG("out");
    int no, count;
    if (!cllm_gguf_split_name(first, &no, &count) || no != 1) {
        return cllm_error(
            CLLM_ERR_INVALID_ARG,
            "%s is not the first part of a split GGUF file (NAME-00001-of-0000N.gguf)", first);
    }
    part *parts = cllm_calloc((size_t)count, sizeof(*parts));
    cllm_gguf_writer *w = cllm_gguf_writer_new();
    cllm_status st = CLLM_OK;
    int64_t total = 0, want = 0;
    if (!parts || !w) {
        st = cllm_error(CLLM_ERR_NOMEM, "joining %s: out of host memory", first);
        goto done;
    }
    for (int k = 0; k < count && st == CLLM_OK; k++) {
        part *p = &parts[k];
        if ((st = cllm_gguf_split_part(first, k + 1, p->path, sizeof(p->path))) != CLLM_OK) break;
        if (same_file(p->path, out)) {
            st = cllm_error(CLLM_ERR_INVALID_ARG, "the joined file cannot be one of its parts (%s)",
                            out);
            break;
        }
        if ((st = open_part(p)) != CLLM_OK) break;
        st = add_part(w, p, k, count, &want, &total);
    }
    if (st == CLLM_OK && total != want) {
        st = cllm_error(CLLM_ERR_FORMAT,
                        "%s: the parts hold %lld tensors, but split.tensors.count is %lld", first,
                        (long long)total, (long long)want);
    }
    if (st == CLLM_OK) {
        static const char *const split_keys[] = {"split.no", "split.count", "split.tensors.count"};
        for (size_t i = 0; i < sizeof(split_keys) / sizeof(split_keys[0]); i++) {
            cllm_gguf_writer_remove(w, split_keys[i]);
        }
        st = cllm_gguf_writer_write(w, out);
    }
    if (st == CLLM_OK) {
        if (n_parts) *n_parts = count;
        if (n_tensors) *n_tensors = total;
    }
done:
    for (int k = 0; parts && k < count; k++) {
        if (parts[k].map) munmap((void *)parts[k].map, parts[k].map_len);
        cllm_gguf_free(parts[k].g);
    }
    cllm_free(parts);
    cllm_gguf_writer_free(w);
    return st;
}
