/*
 * A backend module built for another backend ABI than the library's, for
 * test_module: the loader must refuse it with a message and go on without
 * it. CMakeLists.txt builds it twice into other-abi-modules/ of the build
 * tree (out of the way of the modules every program loads):
 *   cllm-backend-other-version.so  (OTHER_ABI_VERSION_DELTA=1): a newer version,
 *   cllm-backend-other-size.so     (OTHER_ABI_SIZE_DELTA=8): the current
 *                                  version with an entry of another size, as
 *                                  when a slot is added without a bump.
 * Were it accepted, it would add a backend "other-abi" with no devices.
 */
#include "backend/backend-impl.h"

#ifndef OTHER_ABI_VERSION_DELTA
#define OTHER_ABI_VERSION_DELTA 0
#endif
#ifndef OTHER_ABI_SIZE_DELTA
#define OTHER_ABI_SIZE_DELTA 0
#endif

static const char *other_get_name(const cllm_backend_reg *reg) {
    (void)reg;
    return "other-abi";
}

static int other_get_device_count(const cllm_backend_reg *reg) {
    (void)reg;
    return 0;
}

static cllm_device *other_get_device(cllm_backend_reg *reg, int i) {
    (void)reg, (void)i;
    return NULL;
}

static cllm_backend_reg g_other_reg = {
    .api_version = CLLM_BACKEND_API_VERSION + OTHER_ABI_VERSION_DELTA,
    .reg_size = sizeof(struct cllm_backend_reg) + OTHER_ABI_SIZE_DELTA,
    .iface_size = CLLM_BACKEND_IFACE_SIZE,
    .iface =
        {
            .get_name = other_get_name,
            .get_device_count = other_get_device_count,
            .get_device = other_get_device,
            .set_params = NULL, /* takes no options */
        },
    .context = NULL,
};

__attribute__((visibility("default"))) cllm_backend_reg *cllm_backend_module_init(void);
cllm_backend_reg *cllm_backend_module_init(void) { return &g_other_reg; }
