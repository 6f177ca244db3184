/*
 * GGUF files: a hostile-input reader (versions 1, 2 and 3) and a writer.
 *
 * The reader parses the header, the key/value metadata and the tensor infos;
 * it never reads tensor data (the model loader maps or reads that itself,
 * from cllm_gguf_data_offset()). Every count, string length, array length,
 * dimension, type, offset and size is checked against the file size and the
 * limits below before it is used; a bad file gives CLLM_ERR_FORMAT and a
 * message naming the file, the field and the problem, never a crash.
 *
 *     cllm_gguf *g;
 *     if (cllm_gguf_open("model.gguf", &g) != CLLM_OK) { puts(cllm_last_error()); ... }
 *     int64_t k = cllm_gguf_find_key(g, "llama.block_count");
 *     uint32_t n_layer;
 *     st = cllm_gguf_get_u32(g, "llama.block_count", &n_layer);  // type-checked
 *     const cllm_gguf_tensor_info *ti = cllm_gguf_tensor(g, 0);
 *     cllm_gguf_free(g);
 *
 *     cllm_gguf_writer *w = cllm_gguf_writer_new();
 *     cllm_gguf_writer_set_str(w, "general.architecture", "llama");
 *     cllm_gguf_writer_add_tensor(w, "tok_embd.weight", CLLM_TYPE_F32, 2, ne, data);
 *     st = cllm_gguf_writer_write(w, "out.gguf");
 *     cllm_gguf_writer_free(w);
 *
 * Thread safety: a parsed cllm_gguf is immutable; concurrent readers are fine.
 */
#ifndef CLLM_GGUF_H
#define CLLM_GGUF_H

#include "core/common.h"
#include "core/types.h"

/* Limits for untrusted input (to prevent denial of service). */
#define CLLM_GGUF_MAX_STRING        (1u << 24) /* bytes in one string */
#define CLLM_GGUF_MAX_ARRAY         (1u << 26) /* elements in one array */
#define CLLM_GGUF_MAX_KV            (1u << 20) /* key/value pairs */
#define CLLM_GGUF_MAX_TENSORS       (1u << 20) /* tensor infos */
#define CLLM_GGUF_MAX_NAME          256        /* bytes in a tensor name (GGUF limit is 64) */
#define CLLM_GGUF_MAX_KEY           65535      /* bytes in a key (the GGUF limit) */
#define CLLM_GGUF_MAX_ALIGNMENT     (1u << 20) /* general.alignment: a power of two up to this */
#define CLLM_GGUF_DEFAULT_ALIGNMENT 32

/* Metadata value types: on-disk values. */
typedef enum cllm_gguf_type {
    CLLM_GGUF_UINT8 = 0,
    CLLM_GGUF_INT8 = 1,
    CLLM_GGUF_UINT16 = 2,
    CLLM_GGUF_INT16 = 3,
    CLLM_GGUF_UINT32 = 4,
    CLLM_GGUF_INT32 = 5,
    CLLM_GGUF_FLOAT32 = 6,
    CLLM_GGUF_BOOL = 7,
    CLLM_GGUF_STRING = 8,
    CLLM_GGUF_ARRAY = 9,
    CLLM_GGUF_UINT64 = 10,
    CLLM_GGUF_INT64 = 11,
    CLLM_GGUF_FLOAT64 = 12,
    CLLM_GGUF_TYPE_COUNT
} cllm_gguf_type;

/* "uint8", ..., "array"; "unknown" for invalid ids. */
const char *cllm_gguf_type_name(cllm_gguf_type type);
/* Bytes of one value of a scalar type; 0 for string, array and invalid ids. */
size_t cllm_gguf_type_size(cllm_gguf_type type);

typedef struct cllm_gguf_tensor_info {
    const char *name;
    cllm_type type;
    int n_dims;      /* 1..4 */
    int64_t ne[4];   /* unused dims are 1 */
    uint64_t offset; /* from cllm_gguf_data_offset(), aligned */
    size_t size;     /* bytes of data: n_elements / blck_size * type_size */
} cllm_gguf_tensor_info;
/* In v3 files every row is whole blocks (ne[0] % blck_size == 0). Legacy
 * v1/v2 files may hold quantized tensors whose rows end inside a block (only
 * the element count is whole blocks; e.g. the v2 stories260K Q8_0 has
 * ne = {172, 64}): row-wise code must check ne[0] % blck_size before use. */

/* cllm_gguf_open, cllm_gguf_free, the version, alignment, data offset, key
 * and tensor counts and key look-ups are public (cllm.h). Checked by the
 * reader, besides every length against the bytes left: keys non-empty,
 * without NUL bytes, unique; bool values 0 or 1; general.alignment an integer
 * power of two <= CLLM_GGUF_MAX_ALIGNMENT; tensor names non-empty, without NUL
 * bytes, unique; n_dims 1..4; dims > 0 with a product that fits int64_t; type
 * ids valid; ne[0] whole blocks of the type (v1/v2 files: see the size field
 * of cllm_gguf_tensor_info); offsets aligned; data in the file; no two
 * tensors' data overlapping. When a file has no tensors, data_offset may lie
 * past the end of the file. cllm_gguf_open refuses a path that is not a
 * regular file (CLLM_ERR_IO) without blocking on it (a FIFO). */

/*
 * Parses a GGUF image held in memory (`size` bytes at `data`); `name` is used
 * in error messages. The image is not referenced after the call returns.
 */
cllm_status cllm_gguf_parse(const void *data, size_t size, const char *name, cllm_gguf **out);

const char *cllm_gguf_name(const cllm_gguf *g); /* the path or name given */
uint64_t cllm_gguf_file_size(const cllm_gguf *g);

/* ---- key/value metadata ----
 * Indexes i are in [0, n_kv) (asserted); keys keep their file order. */

cllm_gguf_type cllm_gguf_kv_type(const cllm_gguf *g, int64_t i);

/* Scalar values by index; the type must match (asserted: check kv_type first). */
uint8_t cllm_gguf_val_u8(const cllm_gguf *g, int64_t i);
int8_t cllm_gguf_val_i8(const cllm_gguf *g, int64_t i);
uint16_t cllm_gguf_val_u16(const cllm_gguf *g, int64_t i);
int16_t cllm_gguf_val_i16(const cllm_gguf *g, int64_t i);
uint32_t cllm_gguf_val_u32(const cllm_gguf *g, int64_t i);
int32_t cllm_gguf_val_i32(const cllm_gguf *g, int64_t i);
uint64_t cllm_gguf_val_u64(const cllm_gguf *g, int64_t i);
int64_t cllm_gguf_val_i64(const cllm_gguf *g, int64_t i);
float cllm_gguf_val_f32(const cllm_gguf *g, int64_t i);
double cllm_gguf_val_f64(const cllm_gguf *g, int64_t i);
bool cllm_gguf_val_bool(const cllm_gguf *g, int64_t i);
const char *cllm_gguf_val_str(const cllm_gguf *g, int64_t i); /* NUL-terminated */
/* Length of the string value (it may hold NUL bytes). */
size_t cllm_gguf_val_str_len(const cllm_gguf *g, int64_t i);

/* Arrays by index (kv_type == CLLM_GGUF_ARRAY). */
cllm_gguf_type cllm_gguf_arr_type(const cllm_gguf *g, int64_t i);
uint64_t cllm_gguf_arr_n(const cllm_gguf *g, int64_t i);
/* Elements of a numeric or bool array, packed little-endian as on disk,
 * aligned to 8 bytes; bools are 0 or 1. Asserted not a string array. */
const void *cllm_gguf_arr_data(const cllm_gguf *g, int64_t i);
/* Element j of a string array (NUL-terminated; *len, if not NULL, gets its
 * length, since strings may hold NUL bytes). */
const char *cllm_gguf_arr_str(const cllm_gguf *g, int64_t i, uint64_t j, size_t *len);

/*
 * Typed look-ups by key for the model loader. Integer getters accept any
 * integer type whose value fits; float getters accept f32 and f64. Return
 * CLLM_ERR_FORMAT (message names the file and key) if the key is missing or
 * has an incompatible type or value; *out is then untouched.
 */
cllm_status cllm_gguf_get_u32(const cllm_gguf *g, const char *key, uint32_t *out);
cllm_status cllm_gguf_get_i64(const cllm_gguf *g, const char *key, int64_t *out);
cllm_status cllm_gguf_get_f32(const cllm_gguf *g, const char *key, float *out);
cllm_status cllm_gguf_get_bool(const cllm_gguf *g, const char *key, bool *out);
cllm_status cllm_gguf_get_str(const cllm_gguf *g, const char *key, const char **out);

/* ---- tensor infos ---- */

/* Tensor i in file order, i in [0, n_tensors) (asserted). */
const cllm_gguf_tensor_info *cllm_gguf_tensor(const cllm_gguf *g, int64_t i);
/* Index of the tensor named `name`, or -1 (binary search of the sorted names). */
int64_t cllm_gguf_find_tensor(const cllm_gguf *g, const char *name);

/* ---- writer ---- */

typedef struct cllm_gguf_writer cllm_gguf_writer;

/* A writer for GGUF v3 (NULL on OOM). Keys keep the order they are set in;
 * setting a key again replaces its value (in its place).
 *
 * Setters copy their arguments. They return CLLM_ERR_INVALID_ARG for an empty
 * key or one over CLLM_GGUF_MAX_KEY bytes, CLLM_ERR_TOO_LARGE for a string or
 * array over the reader's limits, CLLM_ERR_NOMEM; on failure the writer is
 * unchanged. */
cllm_gguf_writer *cllm_gguf_writer_new(void);
void cllm_gguf_writer_free(cllm_gguf_writer *w);

cllm_status cllm_gguf_writer_set_u8(cllm_gguf_writer *w, const char *key, uint8_t v);
cllm_status cllm_gguf_writer_set_i8(cllm_gguf_writer *w, const char *key, int8_t v);
cllm_status cllm_gguf_writer_set_u16(cllm_gguf_writer *w, const char *key, uint16_t v);
cllm_status cllm_gguf_writer_set_i16(cllm_gguf_writer *w, const char *key, int16_t v);
cllm_status cllm_gguf_writer_set_u32(cllm_gguf_writer *w, const char *key, uint32_t v);
cllm_status cllm_gguf_writer_set_i32(cllm_gguf_writer *w, const char *key, int32_t v);
cllm_status cllm_gguf_writer_set_u64(cllm_gguf_writer *w, const char *key, uint64_t v);
cllm_status cllm_gguf_writer_set_i64(cllm_gguf_writer *w, const char *key, int64_t v);
cllm_status cllm_gguf_writer_set_f32(cllm_gguf_writer *w, const char *key, float v);
cllm_status cllm_gguf_writer_set_f64(cllm_gguf_writer *w, const char *key, double v);
cllm_status cllm_gguf_writer_set_bool(cllm_gguf_writer *w, const char *key, bool v);
cllm_status cllm_gguf_writer_set_str(cllm_gguf_writer *w, const char *key, const char *v);
/* A string of `len` bytes (it may hold NUL bytes). */
cllm_status cllm_gguf_writer_set_str_n(cllm_gguf_writer *w, const char *key, const char *v,
                                       size_t len);
/* A numeric/bool array of n elements of `type`, copied (packed, host order
 * = little-endian); CLLM_ERR_INVALID_ARG for string/array types or bools
 * other than 0 and 1. `data` may be NULL when n is 0. */
cllm_status cllm_gguf_writer_set_arr(cllm_gguf_writer *w, const char *key, cllm_gguf_type type,
                                     const void *data, uint64_t n);
/* A string array, copied (strings NUL-terminated). */
cllm_status cllm_gguf_writer_set_arr_str(cllm_gguf_writer *w, const char *key,
                                         const char *const *strs, uint64_t n);
/* A string array whose string j has lens[j] bytes (it may hold NUL bytes). */
cllm_status cllm_gguf_writer_set_arr_str_n(cllm_gguf_writer *w, const char *key,
                                           const char *const *strs, const size_t *lens, uint64_t n);
/* Copies every key/value of `src` (e.g. a tokenizer from another file), in
 * its order; keys already set are replaced. All or nothing. */
cllm_status cllm_gguf_writer_copy_kv(cllm_gguf_writer *w, const cllm_gguf *src);

/* Removes `key` (the others keep their order); false if it was not set. */
bool cllm_gguf_writer_remove(cllm_gguf_writer *w, const char *key);

/* Adds a tensor; `data` (cllm_row_size(type, ne[0]) * rows bytes) must stay
 * valid until cllm_gguf_writer_write returns; NULL writes zeros. Tensors are
 * written in the order added. CLLM_ERR_INVALID_ARG for a bad name (empty,
 * over CLLM_GGUF_MAX_NAME, already added), type, n_dims (1..4) or shape
 * (dims > 0, ne[0] whole blocks); CLLM_ERR_TOO_LARGE past the limits. */
cllm_status cllm_gguf_writer_add_tensor(cllm_gguf_writer *w, const char *name, cllm_type type,
                                        int n_dims, const int64_t *ne, const void *data);

/* Writes the file (alignment: general.alignment if set, else 32): to a new
 * file beside `path`, synced and renamed over it (core/fileio.h), so that a
 * failure or a kill leaves the old file or none, never a partial one.
 * Tensor data is streamed from the callers' pointers. Returns CLLM_ERR_IO
 * on a failed open/write/sync/rename (naming the file and the system's
 * reason), CLLM_ERR_INVALID_ARG for a bad general.alignment,
 * CLLM_ERR_TOO_LARGE if the data exceeds 2^64 bytes. A file without tensors
 * ends right after its key/values (no padding). The writer can be written
 * again. */
cllm_status cllm_gguf_writer_write(cllm_gguf_writer *w, const char *path);

#endif /* CLLM_GGUF_H */
