/*
 * Backends: buffer types, buffers, devices, backends and the registry.
 *
 * A device (one GPU, the CPU) owns buffer types; a buffer type allocates
 * buffers of device memory; a backend is a stream of computation on a device.
 * Each buffer is tagged with the memory kind it holds (weights, state,
 * compute, workspace), and every device counts the bytes it has allocated per
 * kind, so "planned == allocated" can be checked to the byte.
 *
 *     cllm_device *cpu = cllm_registry_device_by_kind(CLLM_DEVICE_CPU);
 *     cllm_backend *be;
 *     const cllm_backend_params bp = {.n_threads = 4};
 *     if (cllm_device_init_backend(cpu, &bp, &be) != CLLM_OK) ...;
 *     cllm_buffer *buf;
 *     st = cllm_buffer_type_alloc(cllm_device_buffer_type(cpu), bytes,
 *                                 CLLM_MEM_COMPUTE, &buf);
 *     ... place tensors (alloc/galloc.h), cllm_tensor_set(), ...
 *     st = cllm_backend_graph_compute(be, graph);
 *     cllm_buffer_free(buf);
 *     cllm_backend_free(be);
 *
 * Layouts and vtables are in backend-impl.h, for backend implementations.
 */
#ifndef CLLM_BACKEND_BACKEND_H
#define CLLM_BACKEND_BACKEND_H

#include "core/tensor.h"

typedef struct cllm_buffer_type cllm_buffer_type;
typedef struct cllm_device cllm_device;
typedef struct cllm_backend cllm_backend;
typedef struct cllm_backend_reg cllm_backend_reg;

/* cllm_device_kind, and the device name, description, kind and memory
 * queries, are public: cllm.h. */

/* ---- buffer types ------------------------------------------------------ */

const char *cllm_buffer_type_name(const cllm_buffer_type *buft);
/* Alignment, in bytes, of every tensor placed in buffers of this type. */
size_t cllm_buffer_type_alignment(const cllm_buffer_type *buft);
/* Largest single allocation (SIZE_MAX if no limit). A larger buffer is
 * made of pieces (cllm_buffer_type_alloc). */
size_t cllm_buffer_type_max_size(const cllm_buffer_type *buft);
/* The bytes of each piece of a buffer larger than max_size: max_size
 * rounded down to the alignment (SIZE_MAX if no limit). */
size_t cllm_buffer_type_piece_size(const cllm_buffer_type *buft);
/* Where a planner places `size` bytes at or after the aligned `offset` so
 * that they lie within one piece: `offset`, or the start of the next piece
 * when they would cross a piece's end. `size` above the piece size cannot
 * be placed at all: `offset` is returned, and the planner reports the
 * tensor (cllm_buffer_type_piece_size). Aligned when `offset` is. */
size_t cllm_buffer_type_place_offset(const cllm_buffer_type *buft, size_t offset, size_t size);
/* Bytes a tensor needs in this buffer type (default: cllm_nbytes). */
size_t cllm_buffer_type_alloc_size(const cllm_buffer_type *buft, const cllm_tensor *t);
/* True when the CPU can read and write the memory directly. */
bool cllm_buffer_type_is_host(const cllm_buffer_type *buft);
cllm_device *cllm_buffer_type_device(const cllm_buffer_type *buft);

/*
 * Allocates a buffer of exactly `size` bytes (0 is allowed) holding memory of
 * `kind`, and counts it on the device. Above the type's max_size the buffer
 * is made of pieces of cllm_buffer_type_piece_size bytes (the last one
 * smaller), each one allocation counted on the device; a tensor placed in
 * such a buffer lies in one piece (its t->buffer is the piece), so the
 * planners keep every tensor within one (cllm_buffer_type_place_offset).
 * On failure returns CLLM_ERR_DEVICE_MEMORY (CLLM_ERR_NOMEM for host memory)
 * with no piece left allocated, and leaves *out untouched.
 */
cllm_status cllm_buffer_type_alloc(cllm_buffer_type *buft, size_t size, cllm_mem_kind kind,
                                   cllm_buffer **out);

/* ---- buffers ----------------------------------------------------------- */

/*
 * A measure-mode buffer: `size` bytes of a region that does not exist. Tensors
 * placed in it get data pointers that must never be dereferenced; writes
 * through cllm_tensor_set do nothing and reads give zeros. It allocates no
 * device memory and is not counted. NULL on host OOM.
 */
cllm_buffer *cllm_buffer_new_measure(cllm_buffer_type *buft, size_t size);

/* Grows a measure-mode buffer to at least `size` bytes (it has no memory to
 * move; tensors placed in it keep their addresses). Asserts that `buf` is a
 * measure buffer. */
void cllm_buffer_measure_grow(cllm_buffer *buf, size_t size);

/* Frees the buffer and uncounts it on its device; NULL does nothing. */
void cllm_buffer_free(cllm_buffer *buf);
size_t cllm_buffer_size(const cllm_buffer *buf);
void *cllm_buffer_base(const cllm_buffer *buf);
cllm_mem_kind cllm_buffer_kind(const cllm_buffer *buf);
bool cllm_buffer_is_measure(const cllm_buffer *buf);
cllm_buffer_type *cllm_buffer_buft(const cllm_buffer *buf);
/* The allocations of a buffer: 1 (the buffer itself) unless it is made of
 * pieces; piece i (NULL out of range). */
int cllm_buffer_n_pieces(const cllm_buffer *buf);
cllm_buffer *cllm_buffer_piece(cllm_buffer *buf, int i);
/* Whether `other` is `buf` or one of its pieces (tensors placed in `buf`
 * have one of those as their buffer). */
bool cllm_buffer_holds(const cllm_buffer *buf, const cllm_buffer *other);
/* Sets every byte of the buffer to `value`. */
void cllm_buffer_clear(cllm_buffer *buf, uint8_t value);

/*
 * Places tensor `t` at byte `offset` of `buf` (sets t->buffer and t->data;
 * in a buffer of pieces, t->buffer is the piece). Asserts that the tensor
 * fits (within one piece) and that the offset is aligned. For views,
 * use cllm_tensor_init_view once the source is placed.
 */
void cllm_buffer_place_tensor(cllm_buffer *buf, cllm_tensor *t, size_t offset);

/* Points a view (t->view_src != NULL) at its placed source's data. */
void cllm_tensor_init_view(cllm_tensor *t);

/* Copies bytes into / out of a placed tensor's data through its buffer (the
 * memory may be on a device). offset + size must lie within cllm_nbytes(t). */
void cllm_tensor_set(cllm_tensor *t, const void *data, size_t offset, size_t size);
void cllm_tensor_get(const cllm_tensor *t, void *data, size_t offset, size_t size);
/* Convenience: the whole tensor from/to a contiguous host array. */
void cllm_tensor_set_all(cllm_tensor *t, const void *data);
void cllm_tensor_get_all(const cllm_tensor *t, void *data);

/* ---- devices ----------------------------------------------------------- */

/* The default buffer type for this device's memory. */
cllm_buffer_type *cllm_device_buffer_type(cllm_device *dev);
/* Whether a backend of this device can compute `node` (op, types, shapes). */
bool cllm_device_supports_op(cllm_device *dev, const cllm_tensor *node);
/* Whether a backend of this device can use memory of `buft` directly. */
bool cllm_device_supports_buft(cllm_device *dev, const cllm_buffer_type *buft);
/* Bytes this device has allocated now, per memory kind (counted by
 * cllm_buffer_type_alloc / cllm_buffer_free). Thread-safe. */
size_t cllm_device_allocated(const cllm_device *dev, cllm_mem_kind kind);

/* What a device reports about itself beyond memory (the defaults where it
 * says nothing: 1, 1, "", false). */
typedef struct cllm_device_props {
    int n_cores;          /* cores that compute (the CPU: physical cores, its default threads) */
    int n_threads_max;    /* host threads that run at once (the CPU: its affinity mask) */
    const char *features; /* the instruction sets or features its kernels use, as text */
    /* used only where a budget names it (--mem NAME=SIZE): listed, but the
     * fit planner places nothing on it by default (a software device that
     * is no faster than the CPU) */
    bool opt_in;
} cllm_device_props;

void cllm_device_get_props(cllm_device *dev, cllm_device_props *props);

/* How a backend computes; fields a device has no use for are ignored. */
typedef struct cllm_backend_params {
    int n_threads; /* host threads (0: the device's default; 0 .. 1024) */
} cllm_backend_params;

/*
 * Creates a backend (a compute stream) on the device, with `params` (NULL:
 * the defaults). CLLM_ERR_INVALID_ARG for parameters out of range. On
 * failure *out is untouched.
 */
cllm_status cllm_device_init_backend(cllm_device *dev, const cllm_backend_params *params,
                                     cllm_backend **out);

/*
 * Wraps `size` bytes of host memory at `ptr` (a mapped file, the ring of
 * streamed layers) as a buffer of `kind` on the device that does not own
 * them: freeing the buffer leaves the memory alone. The bytes are counted
 * on the device like an allocation. Tensors sit in it where the caller
 * puts them: its buffer type (cllm_device_host_ptr_buffer_type) imposes no
 * alignment. CLLM_ERR_UNSUPPORTED when the device cannot compute from host
 * memory in place (the caller then copies into the device's own buffers);
 * on failure *out is untouched.
 */
cllm_status cllm_device_buffer_from_host_ptr(cllm_device *dev, void *ptr, size_t size,
                                             cllm_mem_kind kind, cllm_buffer **out);
/* The type of those buffers (for measure-mode buffers that stand for one);
 * NULL when the device has none. */
cllm_buffer_type *cllm_device_host_ptr_buffer_type(cllm_device *dev);

/*
 * Weight layouts. A device may store a weight in a layout of its own (the
 * CPU: some matrices 16 rows at a time for its one-column kernels), which
 * only its backend reads. Whoever places weights (the model loader, the
 * ring of streamed layers) calls, per weight tensor `t` placed in a buffer
 * of the device:
 *  - cllm_device_init_weight once: the device decides from t's flags
 *    (CLLM_TENSOR_FLAG_MATMUL_ONLY), type and shape, and records the
 *    decision in t->layout. True when t is to be converted, with the bytes
 *    of host scratch the conversion needs in *scratch (0 else). The
 *    decision is static: the same t gets the same answer, and the memory
 *    planned for a graph does not depend on it.
 *  - cllm_device_convert_weight each time the file's bytes of t have been
 *    written into its place: rewrites them in place into the layout chosen
 *    (nothing for a tensor whose t->layout is 0). `scratch` holds the bytes
 *    init_weight asked for. `file_mapped`: t's bytes are part of a private,
 *    read-only mapping of the file, whose pages the device may replace.
 *    False when a mapped tensor could not be rewritten: it then keeps the
 *    file's layout (t->layout is 0 again); memory it may write never fails.
 * Devices without a layout of their own leave every weight as it is.
 */
bool cllm_device_init_weight(cllm_device *dev, cllm_tensor *t, size_t *scratch);
bool cllm_device_convert_weight(cllm_device *dev, cllm_tensor *t, void *scratch, bool file_mapped);

/* ---- backends ---------------------------------------------------------- */

void cllm_backend_free(cllm_backend *be);
const char *cllm_backend_name(const cllm_backend *be);
cllm_device *cllm_backend_device(const cllm_backend *be);

/*
 * Workspace: scratch memory the backend needs to compute a graph (declared by
 * the backend, allocated as CLLM_MEM_WORKSPACE, never unaccounted).
 * cllm_backend_workspace_size: bytes needed for `g` (0 if none).
 * cllm_backend_reserve_workspace: allocates exactly the bytes `g` needs if the
 * current workspace is smaller (call it with the worst-case graph).
 */
size_t cllm_backend_workspace_size(cllm_backend *be, const cllm_graph *g);
cllm_status cllm_backend_reserve_workspace(cllm_backend *be, const cllm_graph *g);
/* As cllm_backend_reserve_workspace, for a size measured before (e.g. the
 * largest of several graphs): allocates exactly `bytes` if the current
 * workspace is smaller; on failure the current workspace is kept. */
cllm_status cllm_backend_reserve_workspace_bytes(cllm_backend *be, size_t bytes);
/* Bytes of workspace allocated now. */
size_t cllm_backend_workspace_allocated(const cllm_backend *be);

/*
 * Computes every node of `g` in order. All tensors must be placed in real
 * (not measure) buffers this backend can use. Reserves the workspace first if
 * it is too small. Returns CLLM_ERR_INVALID_ARG for unplaced tensors,
 * CLLM_ERR_UNSUPPORTED for ops the device cannot compute.
 */
cllm_status cllm_backend_graph_compute(cllm_backend *be, cllm_graph *g);

/* Waits for queued work (no-op for synchronous backends); an error
 * (CLLM_ERR_BACKEND) if it failed. */
cllm_status cllm_backend_synchronize(cllm_backend *be);

/*
 * Asynchronous work (docs/vulkan.md, "Submission"), for the scheduler.
 * cllm_backend_graph_compute_async: as cllm_backend_graph_compute, but a
 * backend that queues its work (it has `synchronize`) may return before it
 * is done; its results are there after cllm_backend_synchronize.
 * cllm_backend_has_async: whether the backend queues transfers itself
 * (set_tensor_async and get_tensor_async, backend-impl.h).
 * cllm_backend_tensor_set_async: `size` bytes of `data` into t (in this
 * backend's memory) at `offset`, after the work queued before; `data` may
 * be reused on return. cllm_backend_tensor_get_async: t's bytes into
 * `data`, which holds them once cllm_backend_synchronize returns and may be
 * written at any time until then. Without the backend's slots both wait
 * for its queue and copy at once.
 */
cllm_status cllm_backend_graph_compute_async(cllm_backend *be, cllm_graph *g);
bool cllm_backend_has_async(const cllm_backend *be);
cllm_status cllm_backend_tensor_set_async(cllm_backend *be, cllm_tensor *t, const void *data,
                                          size_t offset, size_t size);
cllm_status cllm_backend_tensor_get_async(cllm_backend *be, const cllm_tensor *t, void *data,
                                          size_t offset, size_t size);

/*
 * Copies the bytes of src (cllm_nbytes, from its data pointer) into dst,
 * which must span as many bytes (same layout), across buffers of any
 * devices: directly when either side is host memory, else through a host
 * staging copy. CLLM_ERR_NOMEM if the staging memory cannot be had.
 */
cllm_status cllm_tensor_copy(const cllm_tensor *src, cllm_tensor *dst);

/* ---- registry ---------------------------------------------------------- */

/*
 * Devices are found at run time, the first time the registry is used:
 *  - the backends built into the library, from one table (backend-impl.h:
 *    cllm_builtin_backends, listed in CMakeLists.txt): the CPU, always
 *    device 0;
 *  - loadable backend modules: every file named cllm-backend-*.so in
 *    $CLLM_BACKEND_PATH if set, else in the executable's directory, each
 *    exporting `cllm_backend_reg *cllm_backend_module_init(void)`, whose
 *    entry carries the backend API version it was built with
 *    (backend-impl.h: CLLM_BACKEND_API_VERSION). A module that fails to load
 *    or was built for another version is skipped (the error is logged). Modules run in the
 *    process and call back into the library, so the executable must export
 *    its symbols (-rdynamic); programs that do not load none. The test
 *    device is such a module (cllm-backend-test.so: device "test0" when
 *    CLLM_TEST_DEVICE is set), and a test-only library for the tests;
 *  - backends the program adds itself (cllm_registry_add).
 * Registry functions are thread-safe; devices appear in registry order.
 */
#define CLLM_BACKEND_MODULE_SYMBOL "cllm_backend_module_init"
#define CLLM_BACKEND_MODULE_PREFIX "cllm-backend-"

/* Registries (one per backend: "cpu", modules, added ones...). */
int cllm_registry_count(void);
cllm_backend_reg *cllm_registry_get(int i);
const char *cllm_backend_reg_name(const cllm_backend_reg *reg);

/* Loads the backend module at `path` and adds its devices. CLLM_ERR_IO if it
 * cannot be loaded, CLLM_ERR_FORMAT without the entry point,
 * CLLM_ERR_UNSUPPORTED if this program does not export the library's symbols
 * or the module was built for another backend API version or struct layout,
 * CLLM_ERR_INVALID_ARG if a backend of that name is already there. The
 * registry is unchanged on failure. */
cllm_status cllm_registry_load_module(const char *path);
/* Adds a backend that the program holds itself (e.g. the tests' test
 * device) after the built-in ones and the modules; `reg` must outlive the
 * process's use of the registry. CLLM_ERR_INVALID_ARG if it is incomplete,
 * was built for another backend API version (CLLM_BACKEND_REG_ABI) or a
 * backend of that name is already there (the registry is unchanged). */
cllm_status cllm_registry_add(cllm_backend_reg *reg);
/* Configures the backend named `reg_name` ("test", ...) with its option
 * string `params`, e.g. to enable the test device. CLLM_ERR_UNSUPPORTED if no
 * backend of that name is registered (its module was not found) or it takes
 * no options; else the backend's status (CLLM_ERR_INVALID_ARG for bad
 * options). Not thread-safe with respect to the backend's own use. */
cllm_status cllm_registry_configure(const char *reg_name, const char *params);

/* Loads every cllm-backend-*.so of `dir`; returns how many loaded. */
int cllm_registry_load_modules(const char *dir);

/* Number of devices found (the CPU is always device 0). */
int cllm_registry_device_count(void);
cllm_device *cllm_registry_device(int i);
/* The device named `name` ("cpu", ...) or NULL. */
cllm_device *cllm_registry_device_by_name(const char *name);
/* The first device of `kind` or NULL. */
cllm_device *cllm_registry_device_by_kind(cllm_device_kind kind);

#endif /* CLLM_BACKEND_BACKEND_H */
