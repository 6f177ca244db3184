/*
 * cllm — run GGUF language models on every device of a machine, with memory
 * that is planned, not guessed.
 *
 * This is the public API, the only header a program needs: models, sessions,
 * tokenization, sampling, generation, chat templates, memory plans and
 * devices. Build against an installed tree with `pkg-config --cflags --libs
 * cllm` or CMake's find_package(cllm) (target cllm::cllm).
 *
 * Usage (greedy generation; error checks shortened):
 *
 *     cllm_model *m;
 *     if (cllm_model_load("model.gguf", NULL, &m) != CLLM_OK) {
 *         fprintf(stderr, "%s\n", cllm_last_error());
 *         return 1;
 *     }
 *     int32_t ids[256];
 *     size_t n;
 *     cllm_tokenize(m, "Once upon a time", 16, true, false, ids, 256, &n);
 *     cllm_session *s;
 *     cllm_session_new(m, NULL, &s);                  // KV cache + planned compute
 *     cllm_sampler_params sp = cllm_sampler_default_params();
 *     sp.temperature = 0;                             // greedy
 *     cllm_sampler *smp;
 *     cllm_sampler_new(&sp, cllm_model_n_vocab(m), &smp);
 *     cllm_generate_result res;
 *     cllm_generate(s, smp, ids, n, 32, print_text, NULL, &res);
 *     cllm_generate_result_free(&res);
 *     cllm_sampler_free(smp);
 *     cllm_session_free(s);
 *     cllm_model_free(m);
 *
 * Conventions (all public functions):
 *  - Functions that can fail because of input or the environment return a
 *    cllm_status. On failure, objects are left unchanged, output parameters
 *    are untouched, and a one-line message is logged and kept in
 *    cllm_last_error().
 *  - Who calls `*_new` calls `*_free`; `*_free(NULL)` does nothing.
 *  - NULL: a NULL handle, or NULL for a pointer that a function needs (an
 *    output, a path, an input array of n > 0 elements; the documentation
 *    says which pointers may be NULL), is CLLM_ERR_INVALID_ARG with a
 *    message naming the function, from a function that returns a
 *    cllm_status; a function that returns a value returns what it returns
 *    for "none" (NULL, 0, false, or -1 where -1 means none, e.g.
 *    cllm_gguf_find_key, cllm_token_bos, cllm_session_seq_n_past); a
 *    function that returns nothing does nothing (outputs it was given get
 *    zero). No object changes. tests/test_null.c calls
 *    every public function so.
 *  - Library code never calls exit() and never aborts on input. A broken
 *    invariant (a programmer error, e.g. an index out of its documented
 *    range) aborts with file:line and a message.
 *  - Handles (cllm_model, cllm_session, ...) are opaque; parameter structs
 *    are public and come with a *_default_params() function: start from it
 *    and change the fields you need, so that fields added later keep their
 *    defaults.
 *  - Thread safety: a model is read-only once loaded and may be shared by
 *    any number of threads and sessions; a session, a sampler and a plan are
 *    used by one thread at a time. Functions that say "thread-safe" may be
 *    called from any thread at any time.
 */
#ifndef CLLM_H
#define CLLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CLLM_VERSION_MAJOR 0
#define CLLM_VERSION_MINOR 1
#define CLLM_VERSION_PATCH 0

/* Status codes. CLLM_OK is zero; everything else is an error. */
typedef enum cllm_status {
    CLLM_OK = 0,
    CLLM_ERR_NOMEM,         /* a host allocation failed */
    CLLM_ERR_DEVICE_MEMORY, /* a device buffer allocation failed */
    CLLM_ERR_IO,            /* reading or writing a file failed */
    CLLM_ERR_FORMAT,        /* malformed input (file contents, text) */
    CLLM_ERR_UNSUPPORTED,   /* valid input the library cannot handle */
    CLLM_ERR_INVALID_ARG,   /* an argument out of its documented range */
    CLLM_ERR_TOO_LARGE,     /* a size exceeds a budget, limit or buffer */
    CLLM_ERR_BACKEND,       /* a backend failed to compute */
    CLLM_STATUS_COUNT
} cllm_status;

/* A constant, human-readable name for a status ("out of memory", ...). */
const char *cllm_status_str(cllm_status status);

/* Memory kinds: every byte cllm allocates belongs to exactly one. */
typedef enum cllm_mem_kind {
    CLLM_MEM_WEIGHTS = 0, /* model weights: one set per model */
    CLLM_MEM_STATE,       /* KV cache and other per-session state */
    CLLM_MEM_COMPUTE,     /* transient tensors of graphs, planned ahead */
    CLLM_MEM_WORKSPACE,   /* backend scratch, declared by the backend */
    CLLM_MEM_COUNT
} cllm_mem_kind;

/* "weights", "state", "compute" or "workspace". */
const char *cllm_mem_kind_str(cllm_mem_kind kind);

typedef enum cllm_log_level {
    CLLM_LOG_DEBUG = 0,
    CLLM_LOG_INFO,
    CLLM_LOG_WARN,
    CLLM_LOG_ERROR,
    CLLM_LOG_COUNT
} cllm_log_level;

/* Receives every log line (without a trailing newline). */
typedef void (*cllm_log_fn)(cllm_log_level level, const char *msg, void *user_data);

/*
 * Routes log messages to `fn` (NULL restores the default, which prints
 * warnings and errors to stderr, and everything at or above the level set by
 * the environment variable CLLM_LOG=debug|info|warn|error, one line each,
 * escaped as CLLM_ESCAPE_TEXT). A callback receives messages of every level,
 * unescaped. Thread-safe: the callback and its user data change together,
 * and a message logged meanwhile goes to the old sink or the new one (the
 * callback may itself be called from several threads at once, and may log).
 */
void cllm_log_set(cllm_log_fn fn, void *user_data);

/* Sets the minimum level of the default logger (a value outside the enum is
 * ignored). Thread-safe. */
void cllm_log_set_level(cllm_log_level level);

/*
 * The minimum level of the default logger: the one set by
 * cllm_log_set_level, else the one CLLM_LOG names, else CLLM_LOG_WARN. For
 * a log callback that filters as the default logger does. Thread-safe.
 */
cllm_log_level cllm_log_get_level(void);

/*
 * The message of the last error logged on the calling thread ("" if none).
 * The string stays valid until the next error on this thread.
 *
 * Messages quote the file's strings (an architecture name, a key) as they
 * are: they may hold any byte. Print them with cllm_escape_fputs; the
 * default logger does.
 */
const char *cllm_last_error(void);

/*
 * Escaping of untrusted text (strings from a model file, messages that quote
 * them, paths) so that printing it can neither send control sequences to a
 * terminal nor break the line or JSON structure around it.
 *
 * CLLM_ESCAPE_TEXT (a terminal or a log line): backslash as \\, newline,
 * carriage return and tab as \n, \r, \t, every other control byte (0x00 to
 * 0x1f, 0x7f) as \xNN, each byte that is not part of valid UTF-8 (stray
 * continuation bytes, overlong forms, surrogates, code points past
 * U+10FFFF, a sequence cut short) as \xNN, and the code points a terminal
 * may act on as \uXXXX: C1 controls U+0080..U+009F, the line and paragraph
 * separators U+2028 and U+2029, and the bidirectional controls
 * U+202A..U+202E and U+2066..U+2069. Other valid UTF-8 stays as it is.
 *
 * CLLM_ESCAPE_JSON (the inside of a JSON string; the caller writes the
 * quotes): " and \ escaped, control bytes as \b \f \n \r \t or \u00NN,
 * the code points above as \uXXXX, and each byte that is not part of valid
 * UTF-8 as \ufffd (the replacement character), so that the result is valid
 * JSON in UTF-8 whatever the input.
 */
typedef enum cllm_escape_mode {
    CLLM_ESCAPE_TEXT = 0,
    CLLM_ESCAPE_JSON,
    CLLM_ESCAPE_COUNT
} cllm_escape_mode;

/*
 * Escapes the `len` bytes of `s` (which may hold NUL bytes) into
 * buf[0..size), NUL-terminated, as much as fits in size - 1 bytes; it never
 * cuts an escape or a UTF-8 character in two. Returns the length of the
 * whole escaped text (as snprintf: a result >= size means it was cut).
 * `buf` may be NULL when `size` is 0 (to measure). Thread-safe.
 */
size_t cllm_escape(char *buf, size_t size, const char *s, size_t len, cllm_escape_mode mode);

/* Writes the `len` bytes of `s`, escaped as cllm_escape does, to `f`
 * (errors are the stream's: ferror). Thread-safe as stdio is. */
void cllm_escape_fputs(FILE *f, const char *s, size_t len, cllm_escape_mode mode);

/*
 * Replaces the file at `path` with `size` bytes of `data`, whole or not at
 * all: they are written to a new file in the same directory, synced, and
 * renamed over `path` (a link is followed), then the directory is synced.
 * On failure (a full disk, a file-size limit, ...) the old file is
 * untouched and no temporary file is left: CLLM_ERR_IO naming the file and
 * the system's reason, CLLM_ERR_INVALID_ARG for an empty path or NULL data
 * with a size. A path that names something other than a regular file is
 * refused (CLLM_ERR_IO). A kill at any moment leaves the old file or the
 * new one. Thread-safe.
 */
cllm_status cllm_file_write(const char *path, const void *data, size_t size);

/* "0.1.0" */
const char *cllm_version(void);

/* Monotonic wall clock in milliseconds (for timings). Thread-safe. */
double cllm_time_ms(void);

/* ======================================================================== */
/* Element types                                                            */
/* ======================================================================== */

/*
 * Element types of tensors. These are the GGUF on-disk type ids (they never
 * change), exposed whole rather than as a smaller KV-cache enum: the same
 * values name the weight types that `cllm info` lists and the KV-cache types
 * a session or plan accepts (CLLM_TYPE_F16, CLLM_TYPE_F32), so one enum
 * serves both without a translation table.
 */
typedef enum cllm_type {
    CLLM_TYPE_F32 = 0,
    CLLM_TYPE_F16 = 1,
    CLLM_TYPE_Q4_0 = 2,
    CLLM_TYPE_Q4_1 = 3,
    /* 4, 5: retired (Q4_2, Q4_3) */
    CLLM_TYPE_Q5_0 = 6,
    CLLM_TYPE_Q5_1 = 7,
    CLLM_TYPE_Q8_0 = 8,
    CLLM_TYPE_Q8_1 = 9,
    CLLM_TYPE_Q2_K = 10,
    CLLM_TYPE_Q3_K = 11,
    CLLM_TYPE_Q4_K = 12,
    CLLM_TYPE_Q5_K = 13,
    CLLM_TYPE_Q6_K = 14,
    CLLM_TYPE_Q8_K = 15,
    CLLM_TYPE_IQ2_XXS = 16,
    CLLM_TYPE_IQ2_XS = 17,
    CLLM_TYPE_IQ3_XXS = 18,
    CLLM_TYPE_IQ1_S = 19,
    CLLM_TYPE_IQ4_NL = 20,
    CLLM_TYPE_IQ3_S = 21,
    CLLM_TYPE_IQ2_S = 22,
    CLLM_TYPE_IQ4_XS = 23,
    CLLM_TYPE_I8 = 24,
    CLLM_TYPE_I16 = 25,
    CLLM_TYPE_I32 = 26,
    CLLM_TYPE_I64 = 27,
    CLLM_TYPE_F64 = 28,
    CLLM_TYPE_IQ1_M = 29,
    CLLM_TYPE_BF16 = 30,
    /* 31-33: retired (Q4_0_4_4, Q4_0_4_8, Q4_0_8_8) */
    CLLM_TYPE_TQ1_0 = 34,
    CLLM_TYPE_TQ2_0 = 35,
    /* 36-38: retired (IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8) */
    CLLM_TYPE_MXFP4 = 39,
    CLLM_TYPE_COUNT = 40
} cllm_type;

/* Name of a type ("f32", "q4_0", ...), or "unknown" for invalid ids.
 * A constant string; thread-safe. */
const char *cllm_type_name(cllm_type type);

/* ======================================================================== */
/* Devices                                                                  */
/* ======================================================================== */

/*
 * The devices found at run time: the CPU (always, the last resort of every
 * placement), GPUs whose backend module and driver are present, and the
 * test device when enabled. Device handles belong to the library and stay
 * valid until the process ends.
 *
 *     for (int i = 0; i < cllm_device_count(); i++) {
 *         cllm_device *d = cllm_device_get(i);
 *         size_t free_b, total_b;
 *         cllm_device_memory(d, &free_b, &total_b);
 *         printf("%s %s %zu/%zu\n", cllm_device_name(d),
 *                cllm_device_kind_str(cllm_device_kind_of(d)), free_b, total_b);
 *     }
 */
typedef struct cllm_device cllm_device;

typedef enum cllm_device_kind {
    CLLM_DEVICE_CPU = 0,
    CLLM_DEVICE_GPU,
    CLLM_DEVICE_ACCEL, /* other memory, e.g. the test device */
    CLLM_DEVICE_KIND_COUNT
} cllm_device_kind;

/* "cpu", "gpu" or "accel". A constant string; thread-safe. */
const char *cllm_device_kind_str(cllm_device_kind kind);

/* Number of devices (>= 1: the CPU). The first call finds them. */
int cllm_device_count(void);
/* Device i, i in [0, cllm_device_count()); NULL for another i. */
cllm_device *cllm_device_get(int i);

const char *cllm_device_name(const cllm_device *dev);        /* "cpu", "cuda0", ... */
const char *cllm_device_description(const cllm_device *dev); /* e.g. the CPU model */
cllm_device_kind cllm_device_kind_of(const cllm_device *dev);
/* Free and total memory in bytes, as the device reports it now. */
void cllm_device_memory(cllm_device *dev, size_t *free_bytes, size_t *total_bytes);

/*
 * Enables the test device (a device with its own memory, budget and partial
 * op support, to exercise placement and splits without a GPU) with the
 * options of `spec`, e.g. "budget=64MiB,ops=-rope" (the same as the
 * environment variable CLLM_TEST_DEVICE). Call it before loading models.
 * The test device is no part of the library: it is the backend module
 * cllm-backend-test.so, found next to the program or in CLLM_BACKEND_PATH
 * (the program must export the library's symbols, e.g. link with -rdynamic).
 * CLLM_ERR_INVALID_ARG with a message for a malformed spec,
 * CLLM_ERR_UNSUPPORTED without the module. Not thread-safe.
 */
cllm_status cllm_device_enable_test(const char *spec);

/* Physical CPU cores (the default thread count), and the CPU kernel level in
 * use ("avx512 vnni", "avx2", "portable"). Thread-safe. */
int cllm_cpu_physical_cores(void);
const char *cllm_cpu_features(void);

/* "1.50 GiB", "512 MiB", "100 B" into buf (size bytes); returns buf. */
const char *cllm_format_size(size_t bytes, char *buf, size_t size);

/* ======================================================================== */
/* GGUF files: metadata and tensor table, without the weights               */
/* ======================================================================== */

/*
 * The metadata (key/value pairs) and tensor table of a GGUF file, read
 * without its tensor data. Every model keeps the one of its file
 * (cllm_model_gguf); cllm_gguf_open reads any GGUF file, of a supported
 * architecture or not.
 *
 *     cllm_gguf *g;
 *     if (cllm_gguf_open("model.gguf", &g) != CLLM_OK) ... cllm_last_error() ...
 *     for (int64_t i = 0; i < cllm_gguf_n_kv(g); i++) {
 *         char v[128];
 *         cllm_gguf_val_to_str(g, i, v, sizeof(v));
 *         printf("%s = %s\n", cllm_gguf_key(g, i), v);
 *     }
 *     cllm_gguf_free(g);
 *
 * Thread safety: immutable once opened; any number of threads may read it.
 */
typedef struct cllm_gguf cllm_gguf;

/*
 * Reads the metadata and tensor infos of the file at `path` (the file is
 * hostile input: every count, length, offset, type and shape is checked).
 * CLLM_ERR_IO if it cannot be read, CLLM_ERR_FORMAT for a malformed file,
 * CLLM_ERR_UNSUPPORTED for GGUF this reader does not handle (version above 3,
 * big-endian), CLLM_ERR_NOMEM. On failure *out is untouched. Free the result
 * with cllm_gguf_free.
 */
cllm_status cllm_gguf_open(const char *path, cllm_gguf **out);
/* NULL does nothing. */
void cllm_gguf_free(cllm_gguf *g);

uint32_t cllm_gguf_version(const cllm_gguf *g);     /* 1, 2 or 3 */
size_t cllm_gguf_alignment(const cllm_gguf *g);     /* of tensor data */
uint64_t cllm_gguf_data_offset(const cllm_gguf *g); /* start of tensor data */

/* Keys, in file order: i in [0, n_kv) (asserted). */
int64_t cllm_gguf_n_kv(const cllm_gguf *g);
const char *cllm_gguf_key(const cllm_gguf *g, int64_t i);
/* Index of `key`, or -1. */
int64_t cllm_gguf_find_key(const cllm_gguf *g, const char *key);
/* The type of value i: "uint8", "int8", "uint16", "int16", "uint32",
 * "int32", "float32", "bool", "string", "array", "uint64", "int64",
 * "float64". A constant string. */
const char *cllm_gguf_kv_type_str(const cllm_gguf *g, int64_t i);

/*
 * Value i as text into buf[0..size) (NUL-terminated, cut to fit): numbers in
 * decimal, bools "true"/"false", strings as they are (not quoted), arrays as
 * "[TYPE x N]". Returns the length of the whole text (as snprintf does: a
 * result >= size means it was cut). i in [0, n_kv) (asserted).
 */
size_t cllm_gguf_val_to_str(const cllm_gguf *g, int64_t i, char *buf, size_t size);

/* One entry of the tensor table. */
typedef struct cllm_tensor_desc {
    const char *name; /* owned by the file's handle */
    cllm_type type;   /* as stored */
    int n_dims;       /* 1..4 */
    int64_t ne[4];    /* elements per dimension; unused ones are 1 */
    uint64_t offset;  /* of its data, from cllm_gguf_data_offset() */
    size_t bytes;     /* of its data */
} cllm_tensor_desc;

int64_t cllm_gguf_n_tensors(const cllm_gguf *g);
/* Tensor i in file order, i in [0, n_tensors) (asserted). */
cllm_tensor_desc cllm_gguf_tensor_desc(const cllm_gguf *g, int64_t i);

/*
 * Split GGUF files (NAME-00001-of-0000N.gguf ..., as llama.cpp's gguf-split
 * writes them: each part a GGUF file with split.no (0-based), split.count
 * and, in the first, split.tensors.count).
 *
 * cllm_gguf_split_name: whether `path` ends as a part's name does; then
 * *no (1-based) and *count. False for any other name and for NULL.
 * cllm_gguf_split_part: the path of part k (1-based) of the split file whose
 * first part is `first`, into buf (NUL-terminated); CLLM_ERR_INVALID_ARG
 * when `first` is no first part, k is out of range or buf too small.
 * cllm_gguf_join: the split file whose first part is `first` written as one
 * GGUF file at `out`: the first part's metadata without the split keys,
 * then every part's tensors in order, aligned as general.alignment says.
 * Each part must carry split.no and split.count as its name says, the
 * tensor names must be unique and their number split.tensors.count
 * (CLLM_ERR_FORMAT naming the part otherwise). `out` is written to a
 * temporary file beside it, synced and renamed: on failure nothing is left
 * at `out` (a file already there stays as it was). The parts are only read;
 * `out` may not be one of them. *n_parts and *n_tensors (each optional)
 * receive the counts. All three thread-safe.
 */
bool cllm_gguf_split_name(const char *path, int *no, int *count);
cllm_status cllm_gguf_split_part(const char *first, int k, char *buf, size_t size);
cllm_status cllm_gguf_join(const char *first, const char *out, int *n_parts, int64_t *n_tensors);

/* ======================================================================== */
/* Memory plans                                                             */
/* ======================================================================== */

/*
 * The fit planner: where every weight and KV-cache tensor of a model goes,
 * and how many bytes of each memory kind every device will hold, from the
 * GGUF metadata alone (no weight is read), within the devices' budgets.
 *
 *     cllm_plan_params fp = cllm_plan_default_params();
 *     fp.n_ctx = 4096;
 *     cllm_plan_parse_mem(&fp, "cuda0=6GiB");    // else: free memory
 *     cllm_plan *plan;
 *     if (cllm_plan_file("model.gguf", &fp, &plan) != CLLM_OK) ... cllm_last_error() ...
 *     cllm_plan_print(plan, stdout, false);
 *     cllm_model_params mp = cllm_model_default_params();
 *     mp.plan = plan;                            // load with that placement
 *     cllm_model_load("model.gguf", &mp, &model);
 *     cllm_plan_free(plan);                      // the model keeps what it needs
 *
 * Devices other than the CPU come first; layers (weights with their KV
 * cache) go to the fastest devices, taken from the end of the model, as many
 * as fit; the rest stay on the CPU. Each placement is measured (a graph
 * build and a measure pass, no memory touched): a device fits when weights
 * + state + compute + workspace <= its budget. State, compute and workspace
 * are per session (x n_sessions); weights are shared.
 *
 * Thread safety: a plan is immutable once made; planning touches the device
 * registry, so plan from one thread at a time.
 */
typedef struct cllm_plan cllm_plan;

#define CLLM_PLAN_MAX_BUDGETS 16

typedef struct cllm_plan_budget {
    char device[32]; /* device name ("cpu", "cuda0", "test0") */
    size_t bytes;
} cllm_plan_budget;

typedef struct cllm_plan_params {
    int64_t n_ctx;   /* 0: min(model context, 4096) */
    int64_t n_batch; /* default 512 (at most n_ctx) */
    int n_sessions;  /* default 1 */
    int n_seq;       /* sequences per session (cllm_session_params), default 1 */
    /* KV cache types, K and V each: CLLM_TYPE_F16 (default), CLLM_TYPE_F32,
     * CLLM_TYPE_BF16, CLLM_TYPE_Q8_0 or CLLM_TYPE_Q4_0 (cllm_session_params) */
    cllm_type type_k, type_v;
    int n_threads; /* CPU backend threads (workspace); 0: physical cores */
    bool use_mmap; /* default true: CPU weights are the mapped file's data section */
    int n_budgets;
    cllm_plan_budget budgets[CLLM_PLAN_MAX_BUDGETS]; /* overrides of free memory */
    /* streaming: when the CPU's budget cannot hold its layers, the first
     * ones are streamed through a ring of this many slots (2..64; default
     * 2; 0: never stream, refuse the plan instead). A streamed plan reads
     * the resident weights (use_mmap is set false). */
    int stream_slots;
    double read_bw;  /* storage read bandwidth in bytes/s for the bound; 0: measured */
    bool embeddings; /* sessions plan for embeddings (cllm_session_params.embeddings) */
} cllm_plan_params;

/* The defaults given beside each field. Pure; thread-safe. */
cllm_plan_params cllm_plan_default_params(void);

/* Adds a budget for `device` (replacing one given before).
 * CLLM_ERR_INVALID_ARG if the name is too long or too many are given. */
cllm_status cllm_plan_add_budget(cllm_plan_params *p, const char *device, size_t bytes);

/* Parses "DEVICE=SIZE" (e.g. "test0=64MiB", "cpu=16GiB") into p's budgets.
 * CLLM_ERR_INVALID_ARG with a message for a missing '=', an empty device or
 * a malformed, negative or overflowing size. Unknown devices are reported
 * by the planner. */
cllm_status cllm_plan_parse_mem(cllm_plan_params *p, const char *arg);

/*
 * Plans the model whose metadata `g` holds. CLLM_ERR_INVALID_ARG for bad
 * parameters or a budget naming an unknown device; CLLM_ERR_TOO_LARGE when
 * the CPU (the last resort) cannot hold the rest: the message names the
 * device, the bytes needed and the budget, how many bytes are short, and the
 * largest context that would fit. With streaming (p->stream_slots > 0) the
 * CPU keeps as many layers resident as fit and streams the first ones
 * through a ring of slots (counted as weights); too large is then a budget
 * that cannot hold even the ring, the state and the compute. With streamed
 * layers and p->read_bw == 0 the file's read bandwidth is measured (a short
 * direct-I/O read). On failure *out is untouched. Free the
 * result with cllm_plan_free.
 */
cllm_status cllm_plan_new(const cllm_gguf *g, const cllm_plan_params *p, cllm_plan **out);
/* As cllm_plan_new, opening the file's metadata (errors of cllm_gguf_open too). */
cllm_status cllm_plan_file(const char *path, const cllm_plan_params *p, cllm_plan **out);
/* NULL does nothing. */
void cllm_plan_free(cllm_plan *plan);

/* The per-device table (bytes of each kind), a bar per budget, the layer
 * map and the planning time to `f`; with `verbose`, one line per tensor. */
void cllm_plan_print(const cllm_plan *plan, FILE *f, bool verbose);
/* The same as one JSON object. */
void cllm_plan_print_json(const cllm_plan *plan, FILE *f, bool verbose);

/* ======================================================================== */
/* Models                                                                   */
/* ======================================================================== */

/*
 * A loaded model: the file's metadata, its architecture and weights, and
 * its tokenizer — loaded once, shared read-only by any number of sessions.
 * Weights are mapped from the file (zero copy) by default, or read into an
 * allocated buffer with use_mmap = false; either way they are counted as
 * CLLM_MEM_WEIGHTS. Thread safety: after cllm_model_load returns, every
 * function taking a const cllm_model * may be called from any thread.
 */
typedef struct cllm_model cllm_model;

/*
 * Progress of a model's load: `done` of `total` units of work (bytes of
 * weights read, then laid out), from the thread that loads, with done
 * growing; the last call of a load that succeeds has done == total. For a
 * progress bar of the program's own (the callback must not call the
 * library).
 */
typedef void (*cllm_progress_fn)(uint64_t done, uint64_t total, void *user_data);

typedef struct cllm_model_params {
    bool use_mmap; /* map the file (default) instead of reading it */
    bool progress; /* show a progress bar on stderr while reading big files
                    * (not when progress_fn is set) */
    /* (optional) a placement from cllm_plan_file for this file: the weights
     * of layers placed on other devices go to those devices, and sessions put
     * each layer's KV cache on its device. The model copies what it needs;
     * the plan may be freed after the load. NULL: all on the CPU. */
    const cllm_plan *plan;
    /* (optional) called as the load goes on (cllm_progress_fn), with
     * progress_user_data; default NULL */
    cllm_progress_fn progress_fn;
    void *progress_user_data;
} cllm_model_params;

/* The defaults given beside each field. Pure; thread-safe. */
cllm_model_params cllm_model_default_params(void);

/*
 * Loads the model at `path` (params NULL: the defaults): parses the metadata
 * (hostile input), finds the architecture, checks every weight's shape and
 * type, builds the tokenizer when the file has one, then maps or reads the
 * weights. Returns CLLM_OK with a new model in *out (free it with
 * cllm_model_free, after every session that uses it); CLLM_ERR_IO,
 * CLLM_ERR_FORMAT, CLLM_ERR_UNSUPPORTED (an unknown architecture or type),
 * CLLM_ERR_NOMEM or CLLM_ERR_DEVICE_MEMORY. On failure nothing stays
 * allocated and *out is untouched; the message names the file and the
 * problem.
 */
cllm_status cllm_model_load(const char *path, const cllm_model_params *params, cllm_model **out);
/* Frees the weights, the tokenizer and the metadata; NULL does nothing. */
void cllm_model_free(cllm_model *m);

/*
 * Whether the model's weights can still be trusted. Mapped weights (the
 * default) and streamed layers are read from the file while the model is
 * in use. Mapped: when the file is truncated, a read of the mapping past
 * its new end is caught (the library handles SIGBUS for the mapped range,
 * see docs/api.md) and every later decode fails; when it is modified in
 * place (another size or modification time), the weights may be garbage
 * and every later decode fails too. Streamed: a layer read short or with
 * other bytes than at its first read fails the pass, and this reports it
 * until a pass succeeds (the file restored). Returns CLLM_OK, or
 * CLLM_ERR_IO with a message naming the file and the fault. A model whose
 * weights were read whole (use_mmap = false, nothing streamed) no longer
 * depends on its file. Cheap (an fstat); thread-safe.
 */
cllm_status cllm_model_check(const cllm_model *m);

/*
 * What reading the streamed layers (docs/streaming.md) has cost so far,
 * totals since the model was loaded. A forward pass reads every streamed
 * layer once, whatever the number of tokens it computes: the sequences of
 * a step (cllm_session_decode_seqs, the engine's slots) and the drafted
 * tokens of speculative decoding share its reads, so bytes_read over the
 * tokens generated falls as more of them share a pass.
 */
typedef struct cllm_stream_usage {
    int n_layers;            /* streamed layers; 0: nothing is streamed (all below 0) */
    int n_slots;             /* slots of the ring; n_layers <= n_slots: each layer read once */
    uint64_t bytes_per_pass; /* bytes a pass reads (the layers' runs, block-aligned) */
    uint64_t bytes_read;     /* read from the file, the reads ahead of the next pass included */
    uint64_t passes;         /* forward passes that read the streamed layers and ended well */
    double wait_s;           /* seconds the passes waited for a layer's read */
    double read_s;           /* seconds the I/O thread spent reading */
    uint64_t bytes_cached;   /* of bytes_read, copied from the page cache, where another
                                process's reads left the file (a warm cache) */
} cllm_stream_usage;

/* Fills *out (all zero for a model that streams nothing). CLLM_OK, or
 * CLLM_ERR_INVALID_ARG for NULL. Thread-safe. */
cllm_status cllm_model_stream_usage(const cllm_model *m, cllm_stream_usage *out);

int32_t cllm_model_n_vocab(const cllm_model *m);     /* rows of the output logits */
int64_t cllm_model_n_ctx_train(const cllm_model *m); /* context length trained for */
int64_t cllm_model_n_layer(const cllm_model *m);
int64_t cllm_model_n_embd(const cllm_model *m);
const char *cllm_model_arch(const cllm_model *m); /* "llama", "gpt2", ... */
/* The file's metadata and tensor table, owned by the model. */
const cllm_gguf *cllm_model_gguf(const cllm_model *m);

/*
 * The metadata value of `key` as text (as cllm_gguf_val_to_str) into
 * buf[0..size). Returns the length of the whole text, or -1 when the file
 * has no such key (buf then untouched). Thread-safe.
 */
int64_t cllm_model_meta_str(const cllm_model *m, const char *key, char *buf, size_t size);

/* ======================================================================== */
/* Tokens                                                                   */
/* ======================================================================== */

/*
 * The model's tokenizer, built from the file's tokenizer.ggml.* metadata
 * (SentencePiece "llama" and byte-level BPE "gpt2" with the GPT-2, Llama 3
 * and SmolLM pre-tokenizers). A model loaded from a file without that
 * metadata has none: these functions then return CLLM_ERR_UNSUPPORTED, -1,
 * NULL or false. All are thread-safe (the tokenizer is immutable).
 */

/*
 * Tokenizes text[0..len) (any bytes; invalid UTF-8 is not an error).
 *  - add_special: add BOS and/or EOS as the file's add_bos_token /
 *    add_eos_token say (BOS for most llama files);
 *  - parse_special: control tokens written in the text ("<|im_start|>",
 *    "<s>") become those single tokens (use it for chat-template text).
 * The ids go to ids[0..max_ids) and their number to *n_ids. With ids NULL
 * it only counts (CLLM_OK, *n_ids the number needed). Returns CLLM_OK;
 * CLLM_ERR_TOO_LARGE when more than max_ids ids are needed (then *n_ids is
 * the number needed and ids holds the first max_ids), or when len exceeds
 * 64 MiB; CLLM_ERR_UNSUPPORTED when the model has no tokenizer or a
 * character maps to no token; CLLM_ERR_NOMEM.
 */
cllm_status cllm_tokenize(const cllm_model *m, const char *text, size_t len, bool add_special,
                          bool parse_special, int32_t *ids, size_t max_ids, size_t *n_ids);

/* Flags of cllm_detokenize. */
enum {
    /* Render control tokens as their text ("<|im_end|>"); without it they
     * render as nothing, and the unknown token as U+FFFD. */
    CLLM_DETOK_SPECIAL = 1,
    /* Drop the one leading space that the SentencePiece space prefix put
     * before the first text token (what tokenizing adds). */
    CLLM_DETOK_STRIP_PREFIX = 2,
};

/*
 * The bytes of token `id` as text (control tokens: their text when
 * `special`, else ""). Returns a pointer into the model (valid until it is
 * freed; not NUL-terminated in general) with the length in *len, or NULL for
 * an id outside [0, n_vocab) or a model without a tokenizer.
 */
const char *cllm_token_to_piece(const cllm_model *m, int32_t id, bool special, size_t *len);

/*
 * Decodes ids[0..n_ids) into buf[0..cap) (raw bytes, not NUL-terminated;
 * `flags` a set of CLLM_DETOK_*); the length goes to *len. Returns CLLM_OK;
 * CLLM_ERR_TOO_LARGE when cap is too small (then *len is the length needed
 * and buf holds what fits); CLLM_ERR_INVALID_ARG for an id out of range
 * (nothing written); CLLM_ERR_UNSUPPORTED without a tokenizer. With buf NULL
 * it only measures (CLLM_OK).
 */
cllm_status cllm_detokenize(const cllm_model *m, const int32_t *ids, size_t n_ids, int flags,
                            char *buf, size_t cap, size_t *len);

/*
 * A streaming detokenizer: the text of generated tokens, one token at a
 * time, as whole UTF-8 only. Bytes that begin a character are held back
 * until a later token completes them; ill-formed bytes become U+FFFD. Each
 * token costs its own piece, never a pass over the text before it.
 *
 *     cllm_detokenizer *d;
 *     if (cllm_detokenizer_new(m, 0, &d) != CLLM_OK) ...
 *     for each generated id:
 *         const char *s; size_t len;
 *         cllm_detokenizer_put(d, id, &s, &len);      // possibly empty
 *         fwrite(s, 1, len, stdout);
 *     cllm_detokenizer_flush(d, &s, &len);            // a cut character: U+FFFD
 *     cllm_detokenizer_free(d);
 *
 * Thread safety: a detokenizer is one stream's state, used by one thread at
 * a time; any number may exist on a model.
 */
typedef struct cllm_detokenizer cllm_detokenizer;

/* A detokenizer for model m's tokens (m must outlive it); `flags` a set of
 * CLLM_DETOK_* (CLLM_DETOK_STRIP_PREFIX drops the space prefix before the
 * stream's first text token). CLLM_OK and *out (free it with
 * cllm_detokenizer_free); CLLM_ERR_UNSUPPORTED for a model without a
 * tokenizer; CLLM_ERR_NOMEM. On failure *out is untouched. Thread-safe. */
cllm_status cllm_detokenizer_new(const cllm_model *m, int flags, cllm_detokenizer **out);

/* NULL does nothing. */
void cllm_detokenizer_free(cllm_detokenizer *d);

/*
 * Adds token `id` to the stream. *text / *len get the text that became
 * complete (possibly empty), in a buffer of d valid until the next call on
 * d. Never allocates. CLLM_OK, or CLLM_ERR_INVALID_ARG for an id out of
 * range (d unchanged).
 */
cllm_status cllm_detokenizer_put(cllm_detokenizer *d, int32_t id, const char **text, size_t *len);

/* Ends the stream: the held bytes of a cut character come out as U+FFFD
 * (*text / *len as cllm_detokenizer_put). The detokenizer is then ready for
 * a new stream. */
void cllm_detokenizer_flush(cllm_detokenizer *d, const char **text, size_t *len);

/* Forgets held bytes and starts a new stream. */
void cllm_detokenizer_reset(cllm_detokenizer *d);

/* Special ids; -1 when the file has none (or no tokenizer). */
int32_t cllm_token_bos(const cllm_model *m);
int32_t cllm_token_eos(const cllm_model *m);
int32_t cllm_token_eot(const cllm_model *m); /* end of turn */
/* Whether `id` ends generation (EOS, end of turn, and the usual end-of-turn
 * control tokens); false for ids out of range. */
bool cllm_token_is_eog(const cllm_model *m, int32_t id);
/* Whether tokenizing with add_special adds BOS. */
bool cllm_token_add_bos(const cllm_model *m);

/* ======================================================================== */
/* Chat templates                                                           */
/* ======================================================================== */

/*
 * A conversation becomes prompt text in the format the model was trained
 * on. The file's tokenizer.chat_template is rendered by the library's Jinja
 * interpreter, as Hugging Face's apply_chat_template would (with the
 * generation prompt; docs/chat-templates.md). Its family is recognised by
 * distinctive markers too: chatml (SmolLM2, Qwen2), llama2, llama3, gemma,
 * zephyr, phi3. The family's format, rendered in C, serves files without a
 * template, a style named by the caller, and templates that fail.
 *
 *     cllm_chat_msg msgs[] = {{"user", "Hi!"}};
 *     char *text;
 *     cllm_chat_style style;
 *     if (cllm_chat_apply(m, NULL, msgs, 1, true, &text, NULL, &style) != CLLM_OK) ...
 *     cllm_tokenize(m, text, strlen(text), !cllm_chat_style_has_bos_text(style), true, ...);
 *     ... generate until an EOG token ...
 *     free(text);
 *
 * Known differences of the built-in styles from the reference templates:
 * Llama 3.1's date header is not reproduced; tool calls and multi-part
 * contents are not supported. Contents are copied verbatim: a user who types "<|im_end|>" gets that
 * text, and tokenizing without parse_special keeps it from becoming a control token (tokenize user
 * text on its own if that matters).
 */
typedef enum cllm_chat_style {
    CLLM_CHAT_STYLE_CHATML = 0,
    CLLM_CHAT_STYLE_LLAMA2,
    CLLM_CHAT_STYLE_LLAMA3,
    CLLM_CHAT_STYLE_GEMMA,
    CLLM_CHAT_STYLE_ZEPHYR,
    CLLM_CHAT_STYLE_PHI3,
    CLLM_CHAT_STYLE_COUNT
} cllm_chat_style;

/* One message; both strings NUL-terminated and owned by the caller. */
typedef struct cllm_chat_msg {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content; /* UTF-8 */
} cllm_chat_msg;

/*
 * Renders `msgs[0, n)` for model `m` into a new NUL-terminated string *out
 * (release it with free()) of length *out_len (`out_len` may be NULL), and,
 * if `add_assistant_prompt`, the opening of the assistant's turn. The style
 * is the one of the model's template, or the one named by `style_name`
 * ("chatml", "llama2", "llama3", "gemma", "zephyr", "phi3") when it is not NULL;
 * it goes to *style_out (may be NULL). Without style_name, the file's
 * template itself is rendered (Jinja) with `messages`, `add_generation_prompt`,
 * `bos_token` and `eos_token`; the text then starts with the BOS token's
 * text when cllm_chat_style_has_bos_text(*style_out) says so (it is added
 * if missing, and a bos_token the template printed is removed when the
 * style says no). When that render fails (the template
 * raises, e.g. on a system message it refuses), a warning names why and
 * the style's built-in format is rendered instead. In the built-in formats,
 * when the messages have no system message and a ChatML template carries a
 * default one (SmolLM2, Qwen2.5), it is inserted first, as the template
 * would.
 *
 * Returns CLLM_OK; CLLM_ERR_INVALID_ARG when the model has no template and
 * no style is named, or for broken rules (n >= 1, known roles, non-NULL
 * contents; llama2 and gemma need user and assistant turns alternating);
 * CLLM_ERR_UNSUPPORTED for a template of no known family or an unknown
 * name; CLLM_ERR_NOMEM. On failure the outputs are untouched. Thread-safe.
 */
cllm_status cllm_chat_apply(const cllm_model *m, const char *style_name, const cllm_chat_msg *msgs,
                            size_t n, bool add_assistant_prompt, char **out, size_t *out_len,
                            cllm_chat_style *style_out);

/*
 * Renders the Jinja chat template `template_src` with the variables of
 * `context_json`, a JSON object (NULL for none), e.g.
 *     {"messages": [{"role": "user", "content": "Hi"}], "tools": [...],
 *      "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"}
 * where messages are OpenAI's (content a string or a list of parts,
 * tool_calls with arguments as objects, tool_call_id, name) and any other
 * member is one more variable (e.g. "enable_thinking": false). Renders as
 * Hugging Face's apply_chat_template (jinja2 with trim_blocks and
 * lstrip_blocks; raise_exception; strftime_now at the current local time).
 * Into a new string *out (free()) of length *out_len (may be NULL).
 * CLLM_ERR_FORMAT for a syntax error (with line and column), an error while
 * rendering or raise_exception (its message), all in cllm_last_error();
 * CLLM_ERR_TOO_LARGE past the interpreter's bounds (memory, steps, output,
 * nesting); CLLM_ERR_INVALID_ARG for a NULL template or out; CLLM_ERR_NOMEM.
 * Outputs untouched on failure. Thread-safe.
 */
cllm_status cllm_chat_template_render(const char *template_src, const char *context_json,
                                      char **out, size_t *out_len);

/* The model's tokenizer.chat_template (Jinja source), or NULL. */
const char *cllm_model_chat_template(const cllm_model *m);

/*
 * Recognises the family of a Jinja chat template. The markers, in this
 * order: "<|start_header_id|>" -> llama3; "<|im_start|>" -> chatml;
 * "<start_of_turn>" -> gemma; "[INST]" with "<<SYS>>" -> llama2; "<|user|>"
 * with "<|assistant|>" and "</s>" or eos_token, without "<|end|>" ->
 * zephyr. CLLM_ERR_INVALID_ARG for a NULL or empty template;
 * CLLM_ERR_UNSUPPORTED for an unknown family (*out untouched). Thread-safe.
 */
cllm_status cllm_chat_style_detect(const char *template_src, cllm_chat_style *out);

/* "chatml", "llama2", "llama3", "gemma", "zephyr" or "phi3" ("unknown" out of
 * range). */
const char *cllm_chat_style_name(cllm_chat_style style);

/* Parses a style name, ASCII case-insensitive; also "llama-2", "llama-3",
 * "gemma2", "gemma3". CLLM_ERR_UNSUPPORTED (*out untouched) otherwise, a
 * NULL name included. */
cllm_status cllm_chat_style_from_name(const char *name, cllm_chat_style *out);

/* True if text of this style begins with the BOS token's text (llama2,
 * llama3, gemma): then tokenize it without add_special, or the prompt starts
 * with two. */
bool cllm_chat_style_has_bos_text(cllm_chat_style style);

/* The text that ends a turn ("<|im_end|>", "<|eot_id|>", "<end_of_turn>",
 * "</s>"); "" out of range. A constant string. */
const char *cllm_chat_style_eot(cllm_chat_style style);

/* The default system prompt of a ChatML template, as a new string in *out
 * (free()), or *out = NULL when it has none. CLLM_OK or CLLM_ERR_NOMEM. */
cllm_status cllm_chat_default_system(const char *template_src, char **out);

/*
 * Renders `msgs[0, n)` in `style` into buf (NUL-terminated); *needed gets
 * the size the text requires (strlen + 1). With buf NULL and buf_size 0 it
 * only measures (CLLM_OK). CLLM_ERR_TOO_LARGE if buf_size < *needed (nothing
 * written); CLLM_ERR_INVALID_ARG for a broken rule (see cllm_chat_apply).
 * Thread-safe.
 */
cllm_status cllm_chat_render(cllm_chat_style style, const cllm_chat_msg *msgs, size_t n,
                             bool add_assistant_prompt, char *buf, size_t buf_size, size_t *needed);

/* As cllm_chat_render, into a new string *out (free()) of length *out_len
 * (may be NULL). CLLM_ERR_NOMEM too; outputs untouched on failure. */
cllm_status cllm_chat_render_alloc(cllm_chat_style style, const cllm_chat_msg *msgs, size_t n,
                                   bool add_assistant_prompt, char **out, size_t *out_len);

/* ======================================================================== */
/* Sessions                                                                 */
/* ======================================================================== */

/*
 * A session: one conversation over a shared model. It owns its state
 * memory (the KV cache), its compute memory (planned from its worst-case
 * graphs) and its backends; the model's weights are only referenced.
 *
 *     cllm_session_params sp = cllm_session_default_params();
 *     sp.n_ctx = 2048;
 *     cllm_session *s;
 *     st = cllm_session_new(model, &sp, &s);
 *     st = cllm_session_decode(s, prompt_ids, n_prompt);   // batches of n_batch
 *     const float *logits = cllm_session_logits(s);         // [n_vocab], last token
 *     st = cllm_session_decode(s, &next_id, 1);             // one token at a time
 *     cllm_session_free(s);
 *
 * Memory: at creation the session measures its worst-case graphs through
 * the graph planner, then allocates exactly that: cllm_session_memory()
 * reports planned and allocated bytes per kind, equal by construction.
 *
 * Thread safety: a session is used by one thread at a time; different
 * sessions of one model may run on different threads.
 */
typedef struct cllm_session cllm_session;

typedef struct cllm_session_params {
    int64_t n_ctx;   /* 0: min(model context, 4096) */
    int64_t n_batch; /* prompt tokens per forward pass (default 512) */
    /* KV cache types, K and V each: CLLM_TYPE_F16 (default), CLLM_TYPE_F32,
     * CLLM_TYPE_BF16, or the blocks of 32 CLLM_TYPE_Q8_0 (8.5 bits a value)
     * and CLLM_TYPE_Q4_0 (4.5 bits), which need a head size that is a
     * multiple of 32 and the fused attention (not unfused_attn). Attention
     * reads the blocks where they are; a token's K (V) row is quantized as
     * it is written. */
    cllm_type type_k, type_v;
    int n_threads;        /* 0: one per physical core */
    bool unfused_attn;    /* reference attention (mul_mat + soft_max + mul_mat) */
    bool f32_activations; /* keep matmul activations in F32 (no Q8 quantization) */
    /* keep the logits of every position of each decode (cllm_session_logits_ith);
     * default false: only the last one's (less compute memory) */
    bool all_logits;
    /* sequences (1 .. 64, default 1; 0 is 1): each has a KV cache of n_ctx
     * tokens of its own, and one forward pass may decode tokens of several
     * (cllm_session_decode_seqs) while the weights are read once. The
     * functions without "seq" in their name act on sequence 0. */
    int n_seq;
    /* plan for embeddings (cllm_session_embed): the compute memory of a
     * full batch that outputs the hidden state of every row; default false */
    bool embeddings;
} cllm_session_params;

/* The defaults given beside each field. Pure; thread-safe. */
cllm_session_params cllm_session_default_params(void);

/*
 * Creates a session on `model` (which must outlive it); params NULL: the
 * defaults. Validates the parameters (CLLM_ERR_INVALID_ARG with a message),
 * plans and allocates the KV cache, the compute buffer and the backend
 * workspace (CLLM_ERR_NOMEM, CLLM_ERR_DEVICE_MEMORY, CLLM_ERR_TOO_LARGE when
 * the context does not fit the model's plan). On failure nothing stays
 * allocated and *out is untouched. Free it with cllm_session_free.
 */
cllm_status cllm_session_new(const cllm_model *model, const cllm_session_params *params,
                             cllm_session **out);
/* NULL does nothing. */
void cllm_session_free(cllm_session *s);

/*
 * Appends n tokens to the context and runs the model over them, n_batch at
 * a time (where the last batch would hold fewer than 8 tokens, the one
 * before it is 8 shorter, n_batch >= 16: fewer tokens take other kernels,
 * which round otherwise, so the logits do not depend on n_batch; cllm
 * serve cuts prompts the same way); afterwards cllm_session_logits() holds
 * the logits of the last one
 * (and, with all_logits, cllm_session_logits_ith() those of each one).
 * Token ids out of range: CLLM_ERR_INVALID_ARG. A context that would
 * overflow, or with all_logits more than n_batch tokens in one call (the
 * caller feeds batches): CLLM_ERR_TOO_LARGE, and nothing is processed. On
 * any error the session keeps the tokens and the logits it had before, with
 * one exception: when a pass fails after earlier batches of the same call
 * overwrote the window of a sliding-window layer (see
 * cllm_session_truncate), the context is cleared and the error says so.
 */
cllm_status cllm_session_decode(cllm_session *s, const int32_t *tokens, int64_t n);

/* Logits [n_vocab] of the last token decoded (NULL before the first decode
 * and after a truncate or reset). Valid until the next decode, truncate,
 * reset or free. */
const float *cllm_session_logits(const cllm_session *s);

/*
 * Logits [n_vocab] of position i of the last decode, i in [0, n) where n is
 * the number of tokens that decode was given; a negative i counts from the
 * end (-1: the last). NULL when i is out of range, before the first decode,
 * or when that position's logits were not kept (without all_logits only the
 * last position's are). Valid as cllm_session_logits.
 */
const float *cllm_session_logits_ith(const cllm_session *s, int64_t i);

/*
 * Keeps the first n_keep tokens of the context and forgets the rest (the
 * next decode continues at position n_keep), e.g. to rewind a conversation
 * to a common prefix. CLLM_ERR_INVALID_ARG when n_keep < 0 or > n_past
 * (nothing changes). Keeps all memory. The logits of the last decode are
 * no longer valid afterwards.
 *
 * A model with sliding-window layers (gemma3) keeps only the last window +
 * n_batch - 1 positions in their caches: going back more than n_batch
 * positions from the furthest one decoded would need positions those caches
 * no longer hold, and gives CLLM_ERR_UNSUPPORTED (nothing changes; the
 * caller decodes the tokens to keep again after truncating to 0, which
 * always works).
 */
cllm_status cllm_session_truncate(cllm_session *s, int64_t n_keep);

/* Forgets the context (n_past = 0) and the logits of every sequence; keeps
 * all memory. */
void cllm_session_reset(cllm_session *s);

/* One sequence's tokens in a batch of several (cllm_session_decode_seqs). */
typedef struct cllm_seq_tokens {
    int seq;               /* 0 .. n_seq - 1 */
    const int32_t *tokens; /* appended to the sequence */
    int64_t n_tokens;      /* >= 1 */
} cllm_seq_tokens;

/*
 * Appends the tokens of several sequences (distinct, in any order) and runs
 * the model over all of them in one forward pass: every matrix multiply
 * reads the weights once for the whole batch, and each sequence attends to
 * its own KV cache only, at its own positions, so its logits do not depend
 * on the others (up to the rounding of kernels that see more columns). On
 * the CPU they are bit for bit those the sequence gets alone when every
 * item has one token, when every item has at least 8 tokens (from 8
 * columns on, the kernels sum each column the same way whatever columns
 * share the batch), or when items of one token come first and items of at
 * least 8 tokens after them (a step of generating sequences that prompts
 * join: the one-token columns are computed as alone, the others as a batch
 * of their own).
 * Reading a prompt in chunks that start at multiples of 8 positions and
 * hold at least 8 tokens also gives the logits of reading it whole, bit for
 * bit (cllm serve relies on it to reuse a cut cache). Afterwards
 * cllm_session_seq_logits(s, seq) holds each one's last token's logits.
 * The tokens together must fit in one batch (n_batch): the caller feeds
 * long prompts in chunks. CLLM_ERR_INVALID_ARG for a bad or repeated
 * sequence, an empty item or a token out of range; CLLM_ERR_TOO_LARGE for
 * a sequence whose context would overflow or more than n_batch tokens. On
 * any error no sequence changes (tokens and logits as before).
 */
cllm_status cllm_session_decode_seqs(cllm_session *s, const cllm_seq_tokens *items, int n);

/* Logits [n_vocab] of sequence seq's last token decoded (for 0, as
 * cllm_session_logits); NULL for none or a sequence out of range. Valid
 * until that sequence's next decode, truncate or the session's reset. */
const float *cllm_session_seq_logits(const cllm_session *s, int seq);
/* Tokens in sequence seq's context; -1 out of range. */
int64_t cllm_session_seq_n_past(const cllm_session *s, int seq);
/* As cllm_session_truncate, for sequence seq. */
cllm_status cllm_session_seq_truncate(cllm_session *s, int seq, int64_t n_keep);
/* The session's sequences (n_seq). */
int cllm_session_n_seq(const cllm_session *s);

/* ---- embeddings --------------------------------------------------------- */

/* How the hidden states of a text's tokens become its embedding. The values
 * are those of the GGUF key <arch>.pooling_type. */
typedef enum cllm_pooling {
    CLLM_POOLING_NONE = 0, /* no pooling: one vector per token */
    CLLM_POOLING_MEAN = 1, /* the mean over the tokens */
    CLLM_POOLING_CLS = 2,  /* the first token's */
    CLLM_POOLING_LAST = 3, /* the last token's */
    CLLM_POOLING_COUNT
} cllm_pooling;

/* "none", "mean", "cls", "last"; "unknown" out of range. */
const char *cllm_pooling_str(cllm_pooling p);
/* The pooling named `name` (as cllm_pooling_str); CLLM_ERR_INVALID_ARG
 * naming the choices for any other name (*out untouched). */
cllm_status cllm_pooling_parse(const char *name, cllm_pooling *out);
/* The model's pooling: the file's <arch>.pooling_type when it is one of
 * the above, else CLLM_POOLING_MEAN. Thread-safe. */
cllm_pooling cllm_model_pooling(const cllm_model *m);

/*
 * The embedding of tokens[0..n) (1 .. n_ctx tokens in [0, n_vocab)) on
 * sequence `seq`: the sequence starts anew, reads the tokens in batches of
 * n_batch (as cllm_session_decode), each batch giving the hidden state of
 * every token after the model's output norm (what would go into the
 * output head), and pools them. out receives n_embd floats
 * (cllm_model_n_embd), or n * n_embd, token after token, for
 * CLLM_POOLING_NONE; not normalized (cllm_embd_normalize). Afterwards the
 * sequence holds the tokens (its logits are not computed: it has none).
 * CLLM_ERR_UNSUPPORTED for a session made without params.embeddings or a
 * stage of a pipeline; CLLM_ERR_INVALID_ARG for a bad sequence, pooling or
 * token; CLLM_ERR_TOO_LARGE for more tokens than the context; a failed
 * pass's status (the sequence is then empty, out partly written).
 */
cllm_status cllm_session_seq_embed(cllm_session *s, int seq, const int32_t *tokens, int64_t n,
                                   cllm_pooling pooling, float *out);
/* As cllm_session_seq_embed on sequence 0. */
cllm_status cllm_session_embed(cllm_session *s, const int32_t *tokens, int64_t n,
                               cllm_pooling pooling, float *out);

/*
 * Normalizes v[0..n) in place as llama.cpp's embd_normalize: -1 leaves it,
 * 0 scales the largest magnitude to 32760 (int16 range), 1 to a taxicab
 * norm of 1, 2 to a Euclidean norm of 1 (the default of llama-server and
 * cllm), p > 2 to a p-norm of 1. A zero vector stays zero. Pure.
 */
void cllm_embd_normalize(float *v, int64_t n, int norm);

int64_t cllm_session_n_past(const cllm_session *s);  /* tokens in the context */
int64_t cllm_session_n_ctx(const cllm_session *s);   /* its capacity */
int64_t cllm_session_n_batch(const cllm_session *s); /* tokens per forward pass at most */
int64_t cllm_session_n_vocab(const cllm_session *s);
/* The model the session was made on. */
const cllm_model *cllm_session_model(const cllm_session *s);

/* Bytes per memory kind for one session on one device. Weights are the
 * model's (shared), reported for completeness. */
typedef struct cllm_memory_report {
    size_t planned[CLLM_MEM_COUNT];
    size_t allocated[CLLM_MEM_COUNT];
} cllm_memory_report;

/* Planned and allocated bytes per kind on the CPU (weights from the model). */
cllm_memory_report cllm_session_memory(const cllm_session *s);
/* The same on `dev` (zeros for a device the model does not use). */
cllm_memory_report cllm_session_memory_on(const cllm_session *s, const cllm_device *dev);

/* ======================================================================== */
/* Sampling                                                                 */
/* ======================================================================== */

/*
 * Turns one row of logits into one token id. The chain, in this order (each
 * stage skipped when off):
 *   1. logit bias: logit_bias[i].bias added to the logit of token
 *      logit_bias[i].id (-inf: never sampled);
 *   2. OpenAI's frequency and presence penalties over the tokens generated
 *      so far (those given to cllm_sampler_accept since the last reset, not
 *      the prompt's, which go to cllm_sampler_accept_prompt): for each token
 *      t generated c_t > 0 times, l -= frequency_penalty * c_t +
 *      presence_penalty;
 *   3. ignore_eos: the model's end-of-generation tokens are masked (-inf);
 *   4. repetition penalty over the last repeat_last_n accepted tokens,
 *      prompt and generated (l /= penalty if l > 0, else l *= penalty);
 *   5. grammar (docs/grammar.md): tokens whose text cannot continue the
 *      text accepted so far under `grammar` are masked, and the
 *      end-of-generation tokens are allowed only where that text is a
 *      complete sentence (and are all that is left where nothing else can
 *      follow). The token is first drawn without the mask and kept when the
 *      grammar allows it; else it is drawn again from the masked row (the
 *      same distribution, for far less work);
 *   6. greedy if temperature == 0 (largest logit, ties: lowest id; nothing
 *      below runs);
 *   7. top-k; temperature; softmax; top-p; min-p;
 *   8. one draw with the sampler's own PRNG (xoshiro256**, seeded from
 *      `seed` through splitmix64).
 * A stage's result above the largest float is the largest float. Logits of
 * -inf are a valid mask; NaN or +inf are rejected.
 *
 *     cllm_sampler_params sp = cllm_sampler_default_params();
 *     sp.temperature = 0.7f;
 *     cllm_sampler *smp;
 *     if (cllm_sampler_new_model(&sp, m, &smp) != CLLM_OK) ...
 *     cllm_sampler_accept_prompt(smp, prompt, n_prompt); // the repetition window
 *     int32_t id;
 *     cllm_sampler_sample(smp, cllm_session_logits(s), &id);
 *     cllm_sampler_accept(smp, id);                   // the window and the counts
 *     cllm_sampler_free(smp);
 */

/* Largest accepted repeat_last_n (the window is allocated up front). */
#define CLLM_SAMPLER_MAX_WINDOW (1 << 20)
/* Longest trigger word of a lazy grammar, in bytes. */
#define CLLM_SAMPLER_MAX_TRIGGER 256

/* An additive bias for one token's logit (cllm_sampler_params.logit_bias). */
typedef struct cllm_logit_bias {
    int32_t id; /* token id in [0, n_vocab) */
    float bias; /* finite, or -INFINITY: never sampled */
} cllm_logit_bias;

typedef struct cllm_sampler_params {
    float temperature;     /* 0: greedy; > 0: logits are divided by it. Default 0.8 */
    int32_t top_k;         /* keep the k most likely tokens; 0: off. Default 40 */
    float top_p;           /* nucleus mass in (0, 1]; 1: off. Default 0.95 */
    float min_p;           /* in [0, 1]; keep p >= min_p * max p; 0: off. Default 0.05 */
    float repeat_penalty;  /* > 0; 1: off. Default 1 */
    int32_t repeat_last_n; /* penalty window in tokens, >= 0; 0: off. Default 64 */
    uint64_t seed;         /* PRNG seed. Default 0 */
    /* OpenAI's penalties (stage 2; OpenAI's API takes [-2, 2]): finite;
     * 0: off. Default 0 */
    float frequency_penalty;
    float presence_penalty;
    /* (optional) n_logit_bias biases (stage 1), at most one per token, in
     * no particular order; copied by cllm_sampler_new. Default none */
    const cllm_logit_bias *logit_bias;
    int32_t n_logit_bias;
    /* end-of-generation tokens are never sampled (stage 3); needs the
     * model's tokens: cllm_sampler_new_model. Default false */
    bool ignore_eos;
    /* (optional) a GBNF grammar the generated text must follow (stage 5;
     * docs/grammar.md; cllm_json_schema_to_grammar and cllm_json_grammar
     * make some), NUL-terminated, compiled by cllm_sampler_new_model (the
     * text is not kept); needs the model's tokens. NULL: off. Default NULL */
    const char *grammar;
    /* (optional) the start rule of `grammar`; NULL: "root". Default NULL */
    const char *grammar_root;
    /* (optional) a lazy grammar: with triggers, `grammar` is off (the text
     * is free) until one comes, and on from then to the end. A trigger word
     * (n_grammar_triggers of them, each 1 to CLLM_SAMPLER_MAX_TRIGGER bytes,
     * copied) comes when the generated text holds it (across tokens too):
     * the text from its first byte on must follow the grammar, which so
     * begins with the word (a token that would bring a word with bytes
     * after it that the grammar refuses is not drawn). A trigger token
     * (n_grammar_trigger_tokens ids, copied; such as a control token that
     * opens a tool call, whose text is empty) turns the grammar on after
     * it, its own text not read. Needs `grammar`. Default none */
    const char *const *grammar_triggers;
    int32_t n_grammar_triggers;
    const int32_t *grammar_trigger_tokens;
    int32_t n_grammar_trigger_tokens;
} cllm_sampler_params;

/* One candidate of the final distribution (see cllm_sampler_probs). */
typedef struct cllm_sampler_cand {
    int32_t id; /* token id */
    float p;    /* probability; the candidates returned sum to 1 */
} cllm_sampler_cand;

typedef struct cllm_sampler cllm_sampler;

/* The defaults given beside each field (the usual llama.cpp settings).
 * Pure; thread-safe. */
cllm_sampler_params cllm_sampler_default_params(void);

/*
 * Creates a sampler for rows of `n_vocab` logits with a copy of `*params`
 * (the logit_bias array included). Allocates all scratch memory (about 8
 * bytes per vocabulary entry plus the window, 8 more with a frequency or
 * presence penalty) here; the grammar stage's scratch grows with its stacks
 * while sampling. Returns CLLM_OK and the sampler in *out (free it with
 * cllm_sampler_free); CLLM_ERR_INVALID_ARG (naming the field) if a
 * parameter is out of range or not finite, a bias names a token out of
 * range or twice, ignore_eos or a grammar is set (they need
 * cllm_sampler_new_model), or n_vocab <= 0; CLLM_ERR_NOMEM. On failure
 * *out is untouched. Thread-safe (an independent object).
 */
cllm_status cllm_sampler_new(const cllm_sampler_params *params, int32_t n_vocab,
                             cllm_sampler **out);

/* As cllm_sampler_new for the rows of model m's logits; with ignore_eos its
 * end-of-generation tokens (cllm_token_is_eog) are masked; with a grammar,
 * it is compiled and the bytes of every token are laid out in a trie (a few
 * milliseconds for 50,000 tokens). CLLM_ERR_INVALID_ARG too for ignore_eos
 * or a grammar with a model without a tokenizer; CLLM_ERR_FORMAT for a
 * grammar that does not parse (the message gives line, column and what was
 * expected), CLLM_ERR_TOO_LARGE for one past the grammar's limits.
 * Thread-safe. */
cllm_status cllm_sampler_new_model(const cllm_sampler_params *params, const cllm_model *m,
                                   cllm_sampler **out);

/* Checks `params` for rows of n_vocab logits as cllm_sampler_new does, without
 * making a sampler: CLLM_OK or CLLM_ERR_INVALID_ARG naming the field (the
 * ignore_eos rule aside), or the grammar's error (it is compiled and
 * dropped). Thread-safe. */
cllm_status cllm_sampler_params_check(const cllm_sampler_params *params, int32_t n_vocab);

/* NULL does nothing. */
void cllm_sampler_free(cllm_sampler *s);

/*
 * Chooses one token from `logits` ([n_vocab], never modified) into
 * *out_token. Does not add it to the penalty window (cllm_sampler_accept
 * does). CLLM_ERR_INVALID_ARG if a logit is NaN or +inf, or all are -inf,
 * or no token can continue the grammar; CLLM_ERR_TOO_LARGE for a grammar
 * that needs more parse stacks than its limit; CLLM_ERR_NOMEM (then nothing
 * changes, PRNG included). Not thread-safe.
 */
cllm_status cllm_sampler_sample(cllm_sampler *s, const float *logits, int32_t *out_token);

/*
 * The distribution the next cllm_sampler_sample would draw from: *out points
 * at *n_out candidates with non-zero probabilities summing to 1, in no
 * particular order (greedy: the chosen token with p = 1); with a lazy
 * grammar that is off, the row without a mask (a token the trigger rule
 * would not draw may be there). Does not touch the PRNG. The array
 * belongs to the sampler, valid until its next call. Failures as
 * cllm_sampler_sample. Not thread-safe.
 */
cllm_status cllm_sampler_probs(cllm_sampler *s, const float *logits, const cllm_sampler_cand **out,
                               int32_t *n_out);

/* A generated token: appends `token` to the repetition window, counts
 * it for the frequency and presence penalties and moves the grammar on by
 * its text (call it for every generated token). CLLM_ERR_INVALID_ARG for a
 * token outside [0, n_vocab), or one the grammar does not allow (an end
 * token before the text is complete); CLLM_ERR_TOO_LARGE, CLLM_ERR_NOMEM
 * from the grammar (nothing changes on failure). Not thread-safe. */
cllm_status cllm_sampler_accept(cllm_sampler *s, int32_t token);

/* Prompt tokens: appends tokens[0, n) to the repetition window only (the
 * frequency and presence penalties count generated tokens). Only the last
 * repeat_last_n matter. CLLM_ERR_INVALID_ARG for a token outside
 * [0, n_vocab) (nothing changes). Not thread-safe. */
cllm_status cllm_sampler_accept_prompt(cllm_sampler *s, const int32_t *tokens, size_t n);

/* Empties the window and the counts, re-seeds the PRNG and puts the
 * grammar back at its start (a lazy one off again): as new. Not
 * thread-safe. */
void cllm_sampler_reset(cllm_sampler *s);

/* Whether the grammar stage constrains the next token: true with a
 * grammar that is not lazy, or a lazy one after its trigger; false without
 * a grammar, before the trigger, or for NULL. Not thread-safe. */
bool cllm_sampler_grammar_on(const cllm_sampler *s);

/*
 * JSON Schema to a GBNF grammar for the sampler (docs/grammar.md lists
 * what is supported): the NUL-terminated `schema_json` is parsed and the
 * grammar, whose start rule is "root", goes to *gbnf_out as a new string
 * (free()). Between JSON tokens it allows one space, or a line end and up
 * to 20 blanks of indent.
 * CLLM_ERR_FORMAT for text that is not JSON or a schema that is not valid
 * (the message says where); CLLM_ERR_UNSUPPORTED for a keyword or a value
 * this converter does not handle (the message names it: never ignored,
 * since the output would not follow the schema); CLLM_ERR_TOO_LARGE past
 * its limits; CLLM_ERR_NOMEM. On failure *gbnf_out is untouched.
 * Thread-safe.
 */
cllm_status cllm_json_schema_to_grammar(const char *schema_json, char **gbnf_out);

/* A GBNF grammar of JSON (RFC 8259): rule "root" is any object (what
 * OpenAI's response_format json_object asks for), rule "value" any value.
 * A constant string. Thread-safe. */
const char *cllm_json_grammar(void);

/* ======================================================================== */
/* Generation                                                               */
/* ======================================================================== */

typedef enum cllm_stop_reason {
    CLLM_STOP_EOG = 0,      /* the model produced an end-of-generation token */
    CLLM_STOP_LENGTH,       /* n_predict (max_tokens) tokens were generated */
    CLLM_STOP_CONTEXT_FULL, /* the session's context is full */
    CLLM_STOP_CALLBACK,     /* cllm_generate: the callback returned false */
    CLLM_STOP_STRING,       /* engine: a stop string was generated */
    CLLM_STOP_CANCELLED,    /* engine: cllm_engine_cancel */
    CLLM_STOP_ERROR,        /* engine: the request failed (the event says why) */
    CLLM_STOP_COUNT
} cllm_stop_reason;

/* "eog", "length", "context_full", "callback", "stop_string", "cancelled",
 * "error". A constant string. */
const char *cllm_stop_reason_str(cllm_stop_reason r);

/* Receives each piece of text as it becomes complete UTF-8 (possibly empty)
 * with the token that completed it (-1 for the final flush); return false
 * to stop (cancel) the generation. */
typedef bool (*cllm_on_text_fn)(int32_t id, const char *text, size_t len, void *user_data);

/* ---- speculative decoding --------------------------------------------- */

/*
 * Speculative decoding by n-gram lookup (no draft model): before a
 * sequence's next token is decoded, the engine looks for the longest
 * recent n-gram of its prompt and output (ngram_max tokens down to
 * ngram_min) that ends its text and occurred before, and drafts the tokens
 * that followed it there. The token and its draft are decoded in one
 * forward pass, each draft token a column of its own computed as it would
 * be decoded alone; then the sampler samples every position in turn from
 * the target model's logits, and the draft is kept up to the first sampled
 * token that differs from it: the rows after it are truncated from the KV
 * cache. Every sampled token therefore comes from the same logits, sampler
 * state and random numbers as without speculation: greedy and seeded
 * output is bit for bit the same, only faster where drafts are accepted
 * (copying, editing, extraction). (For a draft that puts all its mass on
 * one token, the accept test of speculative sampling, min(1, p/q), keeps
 * it with probability p(x) and otherwise samples the rest of p: exactly
 * what sampling p and comparing does, with the full sampler chain, top-k,
 * top-p, min-p, grammar included.) Adaptive: after a rejected draft the
 * next one is shorter, after several in a row drafting pauses for a while,
 * and a fully accepted draft doubles the next one's length up to
 * draft_max.
 */
typedef enum cllm_spec_type {
    CLLM_SPEC_NONE = 0,  /* no speculation */
    CLLM_SPEC_NGRAM = 1, /* n-gram lookup in the prompt and output (default) */
    CLLM_SPEC_DRAFT = 2, /* a draft model (cllm_spec_params.draft, cllm_draft_new) */
    CLLM_SPEC_COUNT
} cllm_spec_type;

/*
 * A draft model for speculative decoding (CLLM_SPEC_DRAFT): a second,
 * smaller model with the target's vocabulary and a session of its own,
 * one sequence for each of the target's (sequence i drafts for sequence i
 * of the engine or cllm_generate that uses it). Before a sequence's next
 * token is decoded, the draft model catches up with the tokens the
 * sequence holds (its cache keeps the longest common prefix) and drafts
 * greedily, one token at a time, its most likely next tokens; the target
 * verifies them in one pass as it verifies n-gram drafts. A greedy draft is
 * a draft that puts all its mass on one token, so the test of speculative
 * sampling (keep it with probability min(1, p/q) = p(x), else sample the
 * rest of p) is what sampling the target and comparing does: the output is
 * that of decoding without speculation, bit for bit, greedy and seeded.
 * Which tokens the draft proposes changes only the speed.
 */
typedef struct cllm_draft cllm_draft;

/* Tokens drafted at most per step and sequence. */
#define CLLM_SPEC_MAX_DRAFT 32

typedef struct cllm_spec_params {
    cllm_spec_type type; /* default CLLM_SPEC_NGRAM */
    int ngram_max;       /* the longest n-gram looked up, 1 .. 64 (default 4) */
    int ngram_min;       /* the shortest, 1 .. ngram_max (default 2) */
    int draft_max;       /* tokens drafted at most, 1 .. CLLM_SPEC_MAX_DRAFT (default 8) */
    int draft_min;       /* fewer found: no draft, 1 .. draft_max (default 1) */
    /* CLLM_SPEC_DRAFT: the draft model (borrowed; used by one engine or
     * cllm_generate at a time); NULL for the other types (default NULL) */
    cllm_draft *draft;
} cllm_spec_params;

/* The defaults given beside each field. Pure; thread-safe. */
cllm_spec_params cllm_spec_default_params(void);
/* CLLM_ERR_INVALID_ARG naming the first field out of its range (a draft
 * model for CLLM_SPEC_DRAFT and only for it). */
cllm_status cllm_spec_params_check(const cllm_spec_params *p);
/* "none", "ngram-simple", "draft"; "unknown" out of range. */
const char *cllm_spec_type_str(cllm_spec_type t);
/* The type named `name` (as cllm_spec_type_str; "ngram" too);
 * CLLM_ERR_INVALID_ARG naming the choices otherwise (*out untouched). */
cllm_status cllm_spec_type_parse(const char *name, cllm_spec_type *out);

/*
 * The n-gram draft of hist[0, n) (a sequence's tokens, the last one the
 * token about to be decoded): the tokens that followed the most recent
 * earlier occurrence of its longest final n-gram (p->ngram_max tokens down
 * to p->ngram_min), at most `max` (and p->draft_max) into draft. Returns
 * their number; 0 when nothing matches, when fewer than p->draft_min
 * follow, for CLLM_SPEC_NONE, and for NULL arguments. Pure.
 */
int cllm_spec_ngram_draft(const cllm_spec_params *p, const int32_t *hist, size_t n, int max,
                          int32_t *draft);

/*
 * A draft model `draft` for the sessions of `target`: the vocabularies
 * must be the same (the same number of tokens, the same text of every
 * token, the same BOS and EOS: CLLM_ERR_INVALID_ARG saying where they
 * differ otherwise). Its session has params' shape (NULL: the defaults;
 * n_seq sequences, one for each of the target's, and n_ctx of at least the
 * target's so that it drafts to the end of the context): its KV cache and
 * compute are planned and allocated as any session's (cllm_draft_session,
 * cllm_session_memory). Both models must outlive it; free it with
 * cllm_draft_free.
 */
cllm_status cllm_draft_new(const cllm_model *target, const cllm_model *draft,
                           const cllm_session_params *params, cllm_draft **out);
/* NULL does nothing. */
void cllm_draft_free(cllm_draft *d);
/* The draft model's session (its memory: cllm_session_memory); NULL for NULL. */
cllm_session *cllm_draft_session(cllm_draft *d);

typedef struct cllm_generate_result {
    int32_t *ids; /* generated ids (not the prompt; not the final EOG token) */
    size_t n_ids;
    cllm_stop_reason stop;
    double prompt_ms;     /* decoding the prompt */
    double gen_ms;        /* decoding the generated tokens (sampling excluded) */
    size_t n_gen_decoded; /* generated tokens that went through the model */
    size_t n_drafted;     /* speculative decoding: draft tokens verified */
    size_t n_accepted;    /* of those, kept */
} cllm_generate_result;

/*
 * Decodes prompt[0..n_prompt) into sequence 0 of the session (after
 * whatever it holds), then samples, streams (through on_text, which may be
 * NULL) and decodes one token at a time, up to n_predict tokens (n_predict
 * < 0: until an EOG token or a full context). It is one request of a
 * batch engine (cllm_engine, below) over the session, with `smp` as its
 * sampler. Speculative decoding with the default parameters drafts tokens
 * and verifies them in one pass (cllm_generate_spec): the tokens are those
 * of decoding one at a time.
 * The text comes from the tokenizer of the session's model
 * (CLLM_ERR_UNSUPPORTED if it has none). The prompt goes to the sampler's
 * repetition window (cllm_sampler_accept_prompt), every generated token to
 * cllm_sampler_accept.
 *
 * Afterwards the session holds the prompt and res->n_gen_decoded of the
 * generated ids (the last sampled token is not decoded: the one that hit
 * n_predict, the EOG token, the one refused by the callback, or the one
 * sampled when the context was full).
 *
 * A full context ends generation with CLLM_STOP_CONTEXT_FULL and CLLM_OK; a
 * prompt that does not fit is CLLM_ERR_TOO_LARGE; an empty prompt, or a
 * sampler made for another vocabulary size than the session's model,
 * CLLM_ERR_INVALID_ARG; a failed forward pass its status. On failure the
 * sampler's repetition window, penalty counts and PRNG are as before the
 * call (its grammar's state is not: reset it), and the session holds the
 * context it held (but for a model with sliding-window layers that no
 * longer hold it, cllm_session_truncate: then what was decoded before the
 * failure); the logits of its last decode are no longer valid. *res is
 * filled on success (free it with cllm_generate_result_free) and zeroed on
 * failure. Not thread-safe with respect to the session and the sampler.
 */
cllm_status cllm_generate(cllm_session *s, cllm_sampler *smp, const int32_t *prompt,
                          size_t n_prompt, int n_predict, cllm_on_text_fn on_text, void *user_data,
                          cllm_generate_result *res);

/*
 * cllm_generate with speculative decoding as `spec` says (NULL: the
 * defaults, cllm_spec_default_params; cllm_generate is this with NULL).
 * The output is the same as without speculation, bit for bit; res counts
 * the draft tokens verified and kept. A spec out of its ranges:
 * CLLM_ERR_INVALID_ARG.
 */
cllm_status cllm_generate_spec(cllm_session *s, cllm_sampler *smp, const int32_t *prompt,
                               size_t n_prompt, int n_predict, const cllm_spec_params *spec,
                               cllm_on_text_fn on_text, void *user_data, cllm_generate_result *res);

/* Frees res->ids and zeroes *res; NULL does nothing. */
void cllm_generate_result_free(cllm_generate_result *res);

/* ======================================================================== */
/* Batch engine: many requests over one session                            */
/* ======================================================================== */

/*
 * Continuous batching for a program that serves several requests at once:
 * the engine runs requests over a session of n_seq sequences (one request
 * per sequence at a time; the others wait, first come first served) and
 * advances every busy sequence by one forward pass per step: the generating
 * ones by their last token, the others by a chunk of their prompt. Each
 * request has its own sampler, stop strings, token budget and detokenizer;
 * its answer does not depend on the requests beside it (on the CPU, bit for
 * bit the answer it gets alone: see cllm_session_decode_seqs).
 *
 *     static void on_event(const cllm_event *ev, void *ud) {
 *         if (ev->kind == CLLM_EVENT_TEXT) fwrite(ev->text, 1, ev->len, stdout);
 *         if (ev->kind == CLLM_EVENT_FINISHED) printf(" [%s]\n", cllm_stop_reason_str(ev->reason));
 *     }
 *
 *     cllm_session_params sp = cllm_session_default_params();
 *     sp.n_seq = 4;                                   // four requests at a time
 *     cllm_engine *e;
 *     if (cllm_engine_new(m, &sp, on_event, NULL, &e) != CLLM_OK) ...
 *     cllm_request_params rp = cllm_request_default_params();
 *     rp.sampling.temperature = 0;
 *     rp.max_tokens = 64;
 *     for (int i = 0; i < n_prompts; i++)
 *         cllm_engine_submit(e, prompt[i], n_prompt[i], &rp, NULL, NULL);
 *     while (cllm_engine_n_waiting(e) + cllm_engine_n_running(e) > 0)
 *         cllm_engine_step(e);                        // events arrive in on_event
 *     cllm_engine_free(e);
 *
 * What it does for its requests:
 *  - prefix reuse: a waiting request takes the idle sequence whose cache
 *    shares the longest beginning with its prompt (any idle sequence, not
 *    only one whose cache the prompt extends), and decodes only the rest.
 *    A cache the prompt extends is kept whole (a conversation's next turn:
 *    its answer rows were computed a token at a time, as with any chat
 *    engine). Otherwise, with n_batch >= 16, only rows computed as a fresh
 *    read of a prompt computes them are kept, with at least 8 tokens left
 *    to read, so the answer is bit for bit that of a fresh read; with
 *    n_batch 1 (every row computed alone) the whole common beginning; with
 *    other batch sizes, nothing. A request that can reuse nothing takes the
 *    sequence used longest ago, so the caches of other conversations live
 *    as long as they can.
 *  - prompts are read in chunks of n_batch tokens, no last chunk under 8
 *    (as cllm_session_decode); the chunks of several requests share a pass.
 *  - sampling: a sampler per request (cllm_sampler_new_model with the
 *    request's params: penalties, logit bias and ignore_eos are its
 *    stages); the prompt goes to its repetition window.
 *  - text: a streaming detokenizer per request, and stop strings matched
 *    across token boundaries: text that could still begin a stop string is
 *    held back until it cannot; the stop string and what follows are never
 *    released.
 *
 * Events: cllm_engine_step calls on_event for each one, in order, on the
 * caller's thread; per request: TOKEN (a generated token: every one but an
 * end-of-generation token), TEXT (text that is final: whole UTF-8, before
 * any stop string), and once FINISHED, its last event. The pointers in an
 * event are valid during the call only. on_event may call
 * cllm_engine_submit and cllm_engine_cancel (not step or free).
 *
 * Thread safety: an engine is single-threaded: one thread submits, cancels
 * and steps it (and the session is the engine's while it exists). A server
 * puts it on a thread of its own and feeds it from a queue: its connection
 * threads queue requests (and cancellations) under a mutex, and the engine
 * thread moves them into the engine between steps and hands each event to
 * the connection that waits for it.
 */
typedef struct cllm_engine cllm_engine;

/* Limits of a request. */
#define CLLM_ENGINE_MAX_STOP         16  /* stop strings */
#define CLLM_ENGINE_MAX_STOP_LEN     256 /* bytes in a stop string */
#define CLLM_ENGINE_MAX_TOP_LOGPROBS 20  /* alternatives per token */

typedef struct cllm_request_params {
    /* default: cllm_sampler_default_params(); its logit bias and grammar
     * are copied by cllm_engine_submit */
    cllm_sampler_params sampling;
    /* tokens to generate; -1: until an end-of-generation token or a full
     * context (default) */
    int32_t max_tokens;
    /* (optional) n_stop stop strings, valid UTF-8 of 1 to
     * CLLM_ENGINE_MAX_STOP_LEN bytes each, at most CLLM_ENGINE_MAX_STOP;
     * copied by cllm_engine_submit. Default none */
    const char *const *stop;
    int n_stop;
    /* -1 (default): no log-probabilities; 0: each token's; k in 1 ..
     * CLLM_ENGINE_MAX_TOP_LOGPROBS: and the k most likely tokens' */
    int logprobs;
    /* speculative decoding (default: cllm_spec_default_params(), n-gram
     * lookup on; type CLLM_SPEC_NONE turns it off) */
    cllm_spec_params spec;
} cllm_request_params;

/* The defaults given beside each field. Pure; thread-safe. */
cllm_request_params cllm_request_default_params(void);

typedef enum cllm_event_kind {
    CLLM_EVENT_TOKEN = 0, /* a token was generated */
    CLLM_EVENT_TEXT,      /* text became final */
    CLLM_EVENT_FINISHED,  /* the request ended (its last event) */
    CLLM_EVENT_COUNT
} cllm_event_kind;

/* A token and its log-probability. */
typedef struct cllm_token_logprob {
    int32_t id;
    double logprob;
} cllm_token_logprob;

/* What a request used (with CLLM_EVENT_FINISHED). */
typedef struct cllm_request_usage {
    bool started;         /* it had a sequence (false: cancelled while waiting) */
    size_t n_prompt;      /* prompt tokens */
    size_t n_cached;      /* of those, reused from the sequence's cache */
    size_t n_completion;  /* tokens generated (an end-of-generation token not counted) */
    size_t n_gen_decoded; /* generated tokens that went through the model */
    double queued_ms;     /* from submit to a sequence */
    double prompt_ms;     /* forward passes that read its prompt (shared with others) */
    double gen_ms;        /* forward passes that decoded its tokens (sampling excluded) */
    size_t n_drafted;     /* speculative decoding: draft tokens verified */
    size_t n_accepted;    /* of those, kept (they count in n_gen_decoded) */
} cllm_request_usage;

typedef struct cllm_event {
    cllm_event_kind kind;
    uint64_t request; /* the id cllm_engine_submit gave */
    void *user_data;  /* the request's, given to cllm_engine_submit */
    /* TOKEN: the token. TEXT: the token whose sampling released the text,
     * -1 for text released by the end (held back, or a cut character) */
    int32_t token;
    /* TOKEN with logprobs >= 0: the token's log-probability under the
     * model's distribution (the softmax of the raw logits, before any
     * sampler stage), and the n_top most likely tokens, most likely first;
     * else 0 and none */
    double logprob;
    const cllm_token_logprob *top;
    int n_top;
    /* TEXT: whole UTF-8, len > 0 (not NUL-terminated) */
    const char *text;
    size_t len;
    /* FINISHED: why, what it used, and for CLLM_STOP_ERROR the failure's
     * status and message (else CLLM_OK and NULL) */
    cllm_stop_reason reason;
    cllm_request_usage usage;
    cllm_status status;
    const char *error;
    /* FINISHED of an embedding request (cllm_engine_submit_embed) that
     * succeeded: its vectors, n_embd_rows rows of cllm_model_n_embd floats
     * (one row, or one per token for CLLM_POOLING_NONE), not normalized;
     * else NULL and 0 */
    const float *embd;
    int64_t n_embd_rows;
} cllm_event;

/* Receives every event of an engine (see above). */
typedef void (*cllm_event_fn)(const cllm_event *ev, void *user_data);

/*
 * Creates an engine on `model` with a session of its own (params NULL: the
 * defaults), of params->n_seq sequences; an n_batch below n_seq is raised to
 * n_seq, so that a step of every sequence fits one pass. on_event (not
 * NULL) receives the events with user_data. Errors of cllm_session_new;
 * CLLM_ERR_UNSUPPORTED for a model without a tokenizer; CLLM_ERR_NOMEM. On
 * failure *out is untouched. Free it with cllm_engine_free.
 */
cllm_status cllm_engine_new(const cllm_model *model, const cllm_session_params *params,
                            cllm_event_fn on_event, void *user_data, cllm_engine **out);

/*
 * Creates an engine over the caller's session `s` (which must outlive the
 * engine; free it after cllm_engine_free), e.g. one whose layers run on
 * other hosts. The engine uses all its sequences and treats what they hold
 * as unknown (the first request on a sequence starts it anew); the session
 * must not be used by anything else while the engine exists. Errors as
 * cllm_engine_new.
 */
cllm_status cllm_engine_new_session(cllm_session *s, cllm_event_fn on_event, void *user_data,
                                    cllm_engine **out);

/* Frees the engine (and the session it made; not a caller's). Requests
 * that have not finished are dropped without events. NULL does nothing. */
void cllm_engine_free(cllm_engine *e);

/*
 * Queues a request: prompt[0, n_prompt) (copied; 1 .. n_ctx tokens, each in
 * [0, n_vocab)) generated with `params` (NULL: the defaults; copied, stop
 * strings included). user_data comes back with its events. *id (may be
 * NULL) gets its id, unique in the engine. Nothing is computed until
 * cllm_engine_step. CLLM_ERR_INVALID_ARG naming the field for a bad
 * parameter (the sampler's too), CLLM_ERR_TOO_LARGE for a prompt longer
 * than the context, CLLM_ERR_NOMEM; then nothing is queued.
 */
cllm_status cllm_engine_submit(cllm_engine *e, const int32_t *prompt, size_t n_prompt,
                               const cllm_request_params *params, void *user_data, uint64_t *id);

/*
 * Queues an embedding request: the vector of prompt[0, n_prompt) (copied;
 * 1 .. n_ctx tokens in [0, n_vocab)) pooled with `pooling`, computed as
 * cllm_session_seq_embed on the sequence it is given (which starts anew).
 * It waits with the other requests, first come first served; when it has
 * a sequence, the next cllm_engine_step computes it in passes of its own,
 * after the step's generation pass, and reports one FINISHED event with
 * the vectors (cllm_event.embd) or the error. Needs a session made with
 * params.embeddings (else CLLM_ERR_UNSUPPORTED); otherwise as
 * cllm_engine_submit.
 */
cllm_status cllm_engine_submit_embed(cllm_engine *e, const int32_t *prompt, size_t n_prompt,
                                     cllm_pooling pooling, void *user_data, uint64_t *id);

/*
 * Cancels request `id`, waiting or running: the next cllm_engine_step ends
 * it (CLLM_STOP_CANCELLED, before any further computation for it); a
 * running one's sequence keeps its cache for the requests after it.
 * CLLM_ERR_INVALID_ARG for an id that is not waiting or running (already
 * finished, or never given).
 */
cllm_status cllm_engine_cancel(cllm_engine *e, uint64_t id);

/*
 * One step: ends the cancelled requests, gives waiting requests to idle
 * sequences, then runs the forward pass (or passes: prompt chunks that
 * cannot join the generating tokens go in passes of their own, up to
 * n_batch tokens each) for every running request, samples the requests
 * whose logits are ready, and calls on_event for everything that happened.
 * Does nothing without requests. A request that fails (a forward pass that
 * fails for it alone, out of memory) ends with CLLM_STOP_ERROR and the
 * others go on; if a shared pass fails, its requests are decoded one by one
 * so that only those that cannot go on fail. Returns CLLM_OK.
 */
cllm_status cllm_engine_step(cllm_engine *e);

/* Requests waiting for a sequence, and running on one. */
int cllm_engine_n_waiting(const cllm_engine *e);
int cllm_engine_n_running(const cllm_engine *e);
/* The session the engine runs on (its own, or the caller's). */
cllm_session *cllm_engine_session(cllm_engine *e);

#ifdef __cplusplus
}
#endif

#endif /* CLLM_H */
