/*
 * Backend implementation interface: the vtables a backend fills in, and the
 * layouts of the objects that wrap them ({iface, device, context}).
 *
 * Optional slots say "(optional)"; the public wrapper in backend.c applies
 * the default when a slot is NULL. Use C11 designated initialisers and name
 * every slot.
 */
#ifndef CLLM_BACKEND_IMPL_H
#define CLLM_BACKEND_IMPL_H

#include "backend/backend.h"

#include <stdatomic.h>

/* ---- buffer type ------------------------------------------------------- */

struct cllm_buffer_type_i {
    const char *(*get_name)(const cllm_buffer_type *buft);
    /* Allocates `size` bytes; on failure returns an error and leaves *out. */
    cllm_status (*alloc_buffer)(cllm_buffer_type *buft, size_t size, cllm_buffer **out);
    size_t (*get_alignment)(const cllm_buffer_type *buft);
    /* (optional) default: SIZE_MAX */
    size_t (*get_max_size)(const cllm_buffer_type *buft);
    /* (optional) default: cllm_nbytes(t) */
    size_t (*get_alloc_size)(const cllm_buffer_type *buft, const cllm_tensor *t);
    /* (optional) default: false */
    bool (*is_host)(const cllm_buffer_type *buft);
};

struct cllm_buffer_type {
    struct cllm_buffer_type_i iface;
    cllm_device *device;
    void *context;
};

/* ---- buffer ------------------------------------------------------------ */

struct cllm_buffer_i {
    /* (optional) releases the memory and the context; default: nothing */
    void (*free_buffer)(cllm_buffer *buf);
    void *(*get_base)(const cllm_buffer *buf);
    /* (optional) called when a tensor is placed; default: nothing */
    void (*init_tensor)(cllm_buffer *buf, cllm_tensor *t);
    void (*set_tensor)(cllm_buffer *buf, cllm_tensor *t, const void *data, size_t offset,
                       size_t size);
    void (*get_tensor)(cllm_buffer *buf, const cllm_tensor *t, void *data, size_t offset,
                       size_t size);
    void (*clear)(cllm_buffer *buf, uint8_t value);
};

struct cllm_buffer {
    struct cllm_buffer_i iface;
    cllm_buffer_type *buft;
    void *context;
    size_t size;
    cllm_mem_kind kind;
    bool is_measure; /* measure mode: no memory behind it, not counted */
};

/* Wraps an allocation made by a buffer type. NULL on host OOM (the caller
 * then frees its memory). The generic layer counts it on the device. */
cllm_buffer *cllm_buffer_init(cllm_buffer_type *buft, struct cllm_buffer_i iface, void *context,
                              size_t size);

/* ---- device ------------------------------------------------------------ */

struct cllm_device_i {
    const char *(*get_name)(const cllm_device *dev);
    const char *(*get_description)(const cllm_device *dev);
    void (*get_memory)(cllm_device *dev, size_t *free_bytes, size_t *total_bytes);
    cllm_device_kind (*get_kind)(const cllm_device *dev);
    cllm_buffer_type *(*get_buffer_type)(cllm_device *dev);
    bool (*supports_op)(cllm_device *dev, const cllm_tensor *node);
    /* (optional) default: only the device's own buffer type */
    bool (*supports_buft)(cllm_device *dev, const cllm_buffer_type *buft);
    /* params: never NULL (the wrapper passes the defaults) */
    cllm_status (*init_backend)(cllm_device *dev, const cllm_backend_params *params,
                                cllm_backend **out);
    /* (optional) default: n_cores 1, n_threads_max 1, features "", opt_in false */
    void (*get_props)(cllm_device *dev, cllm_device_props *props);
    /* (optional) a buffer over host memory it does not own (backend.h:
     * cllm_device_buffer_from_host_ptr; the wrapper counts it); NULL: the
     * device cannot compute from host memory in place */
    cllm_status (*buffer_from_host_ptr)(cllm_device *dev, void *ptr, size_t size,
                                        cllm_buffer **out);
    /* (optional, with buffer_from_host_ptr) those buffers' type */
    cllm_buffer_type *(*get_host_ptr_buffer_type)(cllm_device *dev);
    /* (optional) weight layouts (backend.h: cllm_device_init_weight); NULL:
     * every weight keeps the file's layout. convert_weight is called only
     * for tensors whose t->layout init_weight set. */
    bool (*init_weight)(cllm_device *dev, cllm_tensor *t, size_t *scratch);
    bool (*convert_weight)(cllm_device *dev, cllm_tensor *t, void *scratch, bool file_mapped);
};

struct cllm_device {
    struct cllm_device_i iface;
    cllm_backend_reg *reg;
    void *context;
    _Atomic size_t allocated[CLLM_MEM_COUNT]; /* bytes, per memory kind */
};

/* ---- backend ----------------------------------------------------------- */

struct cllm_backend_i {
    const char *(*get_name)(const cllm_backend *be);
    /* frees the context and the backend struct */
    void (*free)(cllm_backend *be);
    /* (optional) workspace bytes needed to compute g; default: 0 */
    size_t (*get_workspace_size)(cllm_backend *be, const cllm_graph *g);
    /* Computes the graph. be->workspace holds at least get_workspace_size bytes.
     * A backend with `synchronize` may return before the work is done (it is
     * queued: the next compute, set_tensor_async and get_tensor_async come
     * after it); the results are there once synchronize returns. */
    cllm_status (*graph_compute)(cllm_backend *be, cllm_graph *g);
    /* (optional) waits for everything queued (compute and transfers) and
     * completes the transfers' host side; an error if the device failed
     * meanwhile; default: nothing (synchronous) */
    cllm_status (*synchronize)(cllm_backend *be);
    /* (optional, both or neither) transfers queued after the work queued
     * before them, without waiting for it. set_tensor_async: `size` bytes
     * of host memory `data` into tensor t (in this backend's device memory)
     * at `offset`; `data` may be reused as soon as it returns.
     * get_tensor_async: t's bytes into host memory `data`, which holds them
     * once synchronize returns (the backend may write it at any time from
     * the call until then, so the caller touches it not before). NULL: the
     * synchronous cllm_tensor_set / cllm_tensor_get after synchronize. */
    cllm_status (*set_tensor_async)(cllm_backend *be, cllm_tensor *t, const void *data,
                                    size_t offset, size_t size);
    cllm_status (*get_tensor_async)(cllm_backend *be, const cllm_tensor *t, void *data,
                                    size_t offset, size_t size);
};

struct cllm_backend {
    struct cllm_backend_i iface;
    cllm_device *device;
    void *context;
    cllm_buffer *workspace; /* CLLM_MEM_WORKSPACE, owned; NULL until reserved */
};

/* ---- registry ---------------------------------------------------------- */

struct cllm_backend_reg_i {
    const char *(*get_name)(const cllm_backend_reg *reg);
    int (*get_device_count)(const cllm_backend_reg *reg);
    cllm_device *(*get_device)(cllm_backend_reg *reg, int i);
    /* (optional) configures the backend from an option string (the test
     * device: its budget, ops, ...); NULL: it takes none */
    cllm_status (*set_params)(cllm_backend_reg *reg, const char *params);
};

struct cllm_backend_reg {
    /* What the backend was built against (CLLM_BACKEND_REG_ABI). These three
     * come first and keep their offsets in every version: the loader reads
     * them before anything else of a module's entry. */
    int api_version;   /* CLLM_BACKEND_API_VERSION */
    size_t reg_size;   /* sizeof(struct cllm_backend_reg) */
    size_t iface_size; /* CLLM_BACKEND_IFACE_SIZE */
    struct cllm_backend_reg_i iface;
    void *context;
};

/*
 * The backend ABI: what a loadable module (cllm-backend-*.so) and the library
 * that loads it must agree on, since the module fills in the structs above
 * and the library reads them (and the other way round).
 *
 * Bump CLLM_BACKEND_API_VERSION whenever a struct of this file changes: a
 * slot added, removed, reordered or retyped in a vtable (the *_i structs), a
 * field of a wrapper ({iface, device, context}, ...), or the meaning of a
 * slot. A module's entry carries the version and the sizes it was built
 * with; cllm_registry_load_module refuses one whose version or sizes differ
 * from the library's (logging both versions and the module's path), and the
 * registry goes on without it. The sizes catch a changed struct whose version
 * was not bumped. The backends built into the library are compiled with it
 * and not checked; cllm_registry_add checks what a program adds.
 */
#define CLLM_BACKEND_API_VERSION 3

/* The sizes of every struct a backend and the library share (the registry
 * entry's own size is reg_size). */
#define CLLM_BACKEND_IFACE_SIZE                                                                    \
    (sizeof(struct cllm_buffer_type_i) + sizeof(struct cllm_buffer_type) +                         \
     sizeof(struct cllm_buffer_i) + sizeof(struct cllm_buffer) + sizeof(struct cllm_device_i) +    \
     sizeof(struct cllm_device) + sizeof(struct cllm_backend_i) + sizeof(struct cllm_backend) +    \
     sizeof(struct cllm_backend_reg_i))

/* The first fields of a backend's registry entry, as this library expects
 * them: `static cllm_backend_reg reg = {CLLM_BACKEND_REG_ABI, .iface = ...}`. */
#define CLLM_BACKEND_REG_ABI                                                                       \
    .api_version = CLLM_BACKEND_API_VERSION, .reg_size = sizeof(struct cllm_backend_reg),          \
    .iface_size = CLLM_BACKEND_IFACE_SIZE

/*
 * The backends built into the library, in registry order: one entry function
 * per name in CLLM_BUILTIN_BACKENDS (CMakeLists.txt), which generates this
 * table (backend/builtin.c.in), so that the generic layer names no backend.
 * Each function returns its backend's registry entry and may be called once.
 */
typedef cllm_backend_reg *(*cllm_backend_reg_fn)(void);
extern const cllm_backend_reg_fn cllm_builtin_backends[];
extern const int cllm_builtin_backend_count;

#endif /* CLLM_BACKEND_IMPL_H */
