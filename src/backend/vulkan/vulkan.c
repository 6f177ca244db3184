/*
 * The Vulkan backend, a loadable module (cllm-backend-vulkan.so): one device
 * "vulkanN" per physical device with a compute queue, its memory as buffers
 * of exactly the planned size, and a backend that records the nodes of a
 * graph it supports into one command buffer (a barrier between dependent
 * dispatches), submits it and waits on a fence.
 *
 * The module opens the Vulkan loader itself (dlopen of libvulkan.so.1): a
 * machine without one loads the module and finds no device. The shaders
 * (GLSL, in shaders/) are compiled to SPIR-V at build time and embedded.
 *
 * Memory: device-local buffers. Where device-local memory is host-visible
 * (lavapipe, integrated GPUs) it is mapped and tensors are read and written
 * in place; else through a staging buffer of VK_STAGING_BYTES and a copy
 * command. CLLM_VULKAN_STAGING=1 takes the staging path everywhere (to test
 * it on a machine whose memory is host-visible).
 *
 * Environment: CLLM_VULKAN_VALIDATE=1 enables VK_LAYER_KHRONOS_validation
 * with a debug-utils messenger that logs each error (CLLM_LOG_ERROR,
 * "vulkan validation: ..."); CLLM_VULKAN_WG sets the workgroup size of the
 * reducing shaders (rms_norm, soft_max, mul_mat; default 64), so that the
 * tests run them with one subgroup per workgroup and with several.
 *
 * Not thread-safe beyond what the interfaces promise: one backend computes
 * at a time per backend object; transfers and submits of a device take its
 * lock.
 */
#include "backend/vulkan/vk-internal.h"
#include "core/hostmem.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the loader -------------------------------------------------------- */

#define VK_DECLARE(name) PFN_##name name;
VK_GLOBAL_FUNCS(VK_DECLARE)
VK_INSTANCE_FUNCS(VK_DECLARE)
VK_EXT_FUNCS(VK_DECLARE)
#undef VK_DECLARE
static PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;

static struct {
    bool init;
    void *lib;
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger;
    int n_devices;
    vk_dev devs[VK_MAX_DEVICES];
} g_vk;

static cllm_backend_reg g_vk_reg;

/* ---- device ------------------------------------------------------------ */

static cllm_status pipelines_init(vk_dev *v) {
    const VkDescriptorSetLayoutBinding bindings[VK_BINDINGS] = {
        {0, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL},
        {1, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL},
        {2, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL},
        {3, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL},
        {4, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL},
        {5, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL},
    };
    const VkDescriptorSetLayoutCreateInfo dci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
        .flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR,
        .bindingCount = VK_BINDINGS,
        .pBindings = bindings};
    VkResult r = vkCreateDescriptorSetLayout(v->d, &dci, NULL, &v->dsl);
    const VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(vk_push)};
    const VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                            .setLayoutCount = 1,
                                            .pSetLayouts = &v->dsl,
                                            .pushConstantRangeCount = 1,
                                            .pPushConstantRanges = &pcr};
    if (r == VK_SUCCESS) r = vkCreatePipelineLayout(v->d, &lci, NULL, &v->layout);
    for (int p = 0; p < VK_PIPE_COUNT && r == VK_SUCCESS; p++) {
        if (vk_shaders[p].int8 && !v->has_int8) continue; /* not used there */
        const VkShaderModuleCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                              .codeSize = vk_shaders[p].size,
                                              .pCode = vk_shaders[p].code};
        VkShaderModule sm;
        if ((r = vkCreateShaderModule(v->d, &sci, NULL, &sm)) != VK_SUCCESS) break;
        uint32_t values[2];
        const uint32_t n_spec = vk_pipe_spec(v, (vk_pipe)p, values);
        const VkSpecializationMapEntry entries[2] = {{0, 0, sizeof(uint32_t)},
                                                     {1, sizeof(uint32_t), sizeof(uint32_t)}};
        const VkSpecializationInfo spec = {n_spec, entries, n_spec * sizeof(uint32_t), values};
        const VkComputePipelineCreateInfo pci = {
            .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                      .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                      .module = sm,
                      .pName = "main",
                      .pSpecializationInfo = n_spec ? &spec : NULL},
            .layout = v->layout};
        r = vkCreateComputePipelines(v->d, VK_NULL_HANDLE, 1, &pci, NULL, &v->pipes[p]);
        vkDestroyShaderModule(v->d, sm, NULL);
    }
    if (r != VK_SUCCESS) {
        return cllm_error(CLLM_ERR_BACKEND, "%s: cannot make its pipelines: %s", v->name,
                          vk_result_str(r));
    }
    return CLLM_OK;
}

static const char *vk_dev_get_name(const cllm_device *dev) { return dev_of(dev)->name; }
static const char *vk_dev_get_description(const cllm_device *dev) { return dev_of(dev)->desc; }

/* Free: the heap's budget less its usage (VK_EXT_memory_budget, which counts
 * other processes too), else the heap less what this process allocated. */
static void vk_dev_get_memory(cllm_device *dev, size_t *free_bytes, size_t *total_bytes) {
    vk_dev *v = dev_of(dev);
    const size_t used = vk_allocated_total(v);
    size_t fr = used < v->heap_size ? (size_t)v->heap_size - used : 0;
    if (v->has_budget) {
        VkPhysicalDeviceMemoryBudgetPropertiesEXT budget = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
        VkPhysicalDeviceMemoryProperties2 mp = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, .pNext = &budget};
        vkGetPhysicalDeviceMemoryProperties2(v->pd, &mp);
        const VkDeviceSize b = budget.heapBudget[v->heap_index];
        const VkDeviceSize u = budget.heapUsage[v->heap_index];
        fr = (size_t)CLLM_MIN(b > u ? b - u : 0, (VkDeviceSize)fr);
    }
    *free_bytes = fr;
    *total_bytes = (size_t)v->heap_size;
}

static cllm_device_kind vk_dev_get_kind(const cllm_device *dev) {
    return dev_of(dev)->software ? CLLM_DEVICE_ACCEL : CLLM_DEVICE_GPU;
}

static cllm_buffer_type *vk_dev_get_buffer_type(cllm_device *dev) { return &dev_of(dev)->buft; }

static bool vk_dev_supports_op(cllm_device *dev, const cllm_tensor *node) {
    if (!vk_has_work(node)) return true;
    return vk_op_supported(dev_of(dev), node);
}

static bool vk_dev_supports_buft(cllm_device *dev, const cllm_buffer_type *buft) {
    return buft == &dev_of(dev)->buft;
}

static void vk_dev_get_props(cllm_device *dev, cllm_device_props *props) {
    const vk_dev *v = dev_of(dev);
    props->n_cores = 1;
    props->n_threads_max = 1;
    props->features = "vulkan";
    props->opt_in = v->software;
}

static cllm_status vk_dev_init_backend(cllm_device *dev, const cllm_backend_params *params,
                                       cllm_backend **out) {
    CLLM_UNUSED(params);
    vk_dev *v = dev_of(dev);
    pthread_mutex_lock(&v->lock);
    cllm_status st = CLLM_OK;
    if (!v->pipes[0]) st = pipelines_init(v);
    pthread_mutex_unlock(&v->lock);
    CLLM_TRY(st);
    return vk_backend_new(v, out);
}

static const struct cllm_device_i k_vk_device_iface = {
    .get_name = vk_dev_get_name,
    .get_description = vk_dev_get_description,
    .get_memory = vk_dev_get_memory,
    .get_kind = vk_dev_get_kind,
    .get_buffer_type = vk_dev_get_buffer_type,
    .supports_op = vk_dev_supports_op,
    .supports_buft = vk_dev_supports_buft,
    .init_backend = vk_dev_init_backend,
    .get_props = vk_dev_get_props,
    .buffer_from_host_ptr = NULL, /* computes only from its own memory */
    .get_host_ptr_buffer_type = NULL,
    .init_weight = NULL, /* weights keep the file's layout */
    .convert_weight = NULL,
};

/* ---- discovery --------------------------------------------------------- */

static VKAPI_ATTR VkBool32 VKAPI_CALL on_validation(
    VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT types,
    const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
    CLLM_UNUSED(types);
    CLLM_UNUSED(user);
    if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
        cllm_log(CLLM_LOG_ERROR, "vulkan validation: %s", data->pMessage);
    } else {
        CLLM_LOG_WARN("vulkan validation: %s", data->pMessage);
    }
    return VK_FALSE;
}

static bool has_extension(const VkExtensionProperties *ext, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++) {
        if (!strcmp(ext[i].extensionName, name)) return true;
    }
    return false;
}

static bool env_on(const char *name) {
    const char *e = getenv(name);
    return e && *e && strcmp(e, "0") != 0;
}

static cllm_status instance_init(bool validate) {
    uint32_t n_layers = 0;
    vkEnumerateInstanceLayerProperties(&n_layers, NULL);
    VkLayerProperties *layers = cllm_calloc(CLLM_MAX(n_layers, 1u), sizeof(*layers));
    if (!layers) return cllm_error(CLLM_ERR_NOMEM, "vulkan: out of host memory");
    vkEnumerateInstanceLayerProperties(&n_layers, layers);
    bool have_layer = false;
    for (uint32_t i = 0; i < n_layers; i++) {
        if (!strcmp(layers[i].layerName, "VK_LAYER_KHRONOS_validation")) have_layer = true;
    }
    cllm_free(layers);
    if (validate && !have_layer) {
        cllm_log(CLLM_LOG_ERROR,
                 "vulkan: CLLM_VULKAN_VALIDATE is set but VK_LAYER_KHRONOS_validation is "
                 "not installed (Debian: vulkan-validationlayers)");
        validate = false;
    }
    const char *layer = "VK_LAYER_KHRONOS_validation";
    const char *ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    const VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                                   .pApplicationName = "cllm",
                                   .pEngineName = "cllm",
                                   .apiVersion = VK_API_VERSION_1_2};
    const VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                      .pApplicationInfo = &app,
                                      .enabledLayerCount = validate ? 1 : 0,
                                      .ppEnabledLayerNames = &layer,
                                      .enabledExtensionCount = validate ? 1 : 0,
                                      .ppEnabledExtensionNames = &ext};
    const VkResult r = vkCreateInstance(&ici, NULL, &g_vk.instance);
    if (r != VK_SUCCESS) {
        return cllm_error(CLLM_ERR_BACKEND, "vulkan: no instance: %s", vk_result_str(r));
    }
#define VK_LOAD(name) name = (PFN_##name)vkGetInstanceProcAddr(g_vk.instance, #name);
    VK_INSTANCE_FUNCS(VK_LOAD)
    VK_EXT_FUNCS(VK_LOAD)
#undef VK_LOAD
    if (validate && vkCreateDebugUtilsMessengerEXT) {
        const VkDebugUtilsMessengerCreateInfoEXT mci = {
            .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
            .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT |
                               VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT,
            .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
            .pfnUserCallback = on_validation};
        vkCreateDebugUtilsMessengerEXT(g_vk.instance, &mci, NULL, &g_vk.messenger);
    }
    return CLLM_OK;
}

static const char *type_str(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU-software";
    default: return "other";
    }
}

/* Makes device v of physical device pd, or says why it cannot be used. */
static bool device_init(vk_dev *v, VkPhysicalDevice pd, int index) {
    v->pd = pd;
    snprintf(v->name, sizeof(v->name), "vulkan%d", index);
    vkGetPhysicalDeviceProperties(pd, &v->props);
    VkPhysicalDeviceDriverProperties drv = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties m3 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, .pNext = &drv};
    VkPhysicalDeviceSubgroupProperties sg = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, .pNext = &m3};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                      .pNext = &sg};
    vkGetPhysicalDeviceProperties2(pd, &p2);
    v->subgroup_size = sg.subgroupSize;
    v->max_alloc = m3.maxMemoryAllocationSize;
    vk_mem_init(v); /* and the test knobs (buffer.c) */
    v->software = v->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    const char *why = NULL;
    const VkSubgroupFeatureFlags need =
        VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
    if (!(sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) ||
        (sg.supportedOperations & need) != need) {
        why = "no subgroup arithmetic in compute shaders";
    }

    uint32_t n_ext = 0;
    vkEnumerateDeviceExtensionProperties(pd, NULL, &n_ext, NULL);
    VkExtensionProperties *ext = cllm_calloc(CLLM_MAX(n_ext, 1u), sizeof(*ext));
    if (!ext) return false;
    vkEnumerateDeviceExtensionProperties(pd, NULL, &n_ext, ext);
    const bool push = has_extension(ext, n_ext, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
    v->has_budget = has_extension(ext, n_ext, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    const bool dot_ext =
        has_extension(ext, n_ext, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
    cllm_free(ext);
    VkPhysicalDeviceShaderIntegerDotProductFeatures dot = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
    if (dot_ext) {
        VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                        .pNext = &dot};
        vkGetPhysicalDeviceFeatures2(pd, &f2);
    }
    v->has_int8 = dot_ext && dot.shaderIntegerDotProduct;
    const char *int8 = getenv("CLLM_VULKAN_INT8");
    v->int8 = v->has_int8 && !(int8 && !strcmp(int8, "0"));
    if (!push && !why) why = "no VK_KHR_push_descriptor";
    /* timeline semaphores (Vulkan 1.2): asynchronous transfers and compute */
    VkPhysicalDeviceTimelineSemaphoreFeatures tl = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES};
    if (v->props.apiVersion >= VK_API_VERSION_1_2 && vkWaitSemaphores &&
        vkGetSemaphoreCounterValue) {
        VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                        .pNext = &tl};
        vkGetPhysicalDeviceFeatures2(pd, &f2);
    }
    const bool has_timeline = tl.timelineSemaphore;

    uint32_t n_q = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n_q, NULL);
    VkQueueFamilyProperties qf[16];
    n_q = CLLM_MIN(n_q, 16u);
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n_q, qf);
    int family = -1;
    for (uint32_t i = 0; i < n_q && family < 0; i++) {
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) family = (int)i;
    }
    if (family < 0 && !why) why = "no compute queue";

    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(pd, &mp);
    const VkMemoryPropertyFlags local = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    const VkMemoryPropertyFlags host =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int direct = -1, any_local = -1, staging = -1;
    for (uint32_t i = 0; i < mp.memoryTypeCount; i++) {
        const VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
        if ((f & (local | host)) == (local | host) && direct < 0) direct = (int)i;
        if ((f & local) && any_local < 0) any_local = (int)i;
        if ((f & host) == host && staging < 0) staging = (int)i;
    }
    v->mapped = direct >= 0 && !env_on("CLLM_VULKAN_STAGING");
    const int type = v->mapped ? direct : any_local;
    if ((type < 0 || staging < 0) && !why) why = "no device-local memory";
    if (why) {
        CLLM_LOG_INFO("vulkan: %s (%s) is not used: %s", v->props.deviceName,
                      type_str(v->props.deviceType), why);
        return false;
    }
    v->mem_type = (uint32_t)type;
    v->staging_type = (uint32_t)staging;
    v->heap_index = mp.memoryTypes[type].heapIndex;
    v->heap_size = mp.memoryHeaps[v->heap_index].size;
    v->queue_family = (uint32_t)family;
    v->alignment =
        CLLM_MAX((size_t)VK_MIN_ALIGNMENT, (size_t)v->props.limits.minStorageBufferOffsetAlignment);
    v->wg = VK_WG_DEFAULT;
    const char *wg = getenv("CLLM_VULKAN_WG");
    if (wg && *wg) {
        const long n = strtol(wg, NULL, 10);
        if (n >= 1 && n <= (long)v->props.limits.maxComputeWorkGroupSize[0] && n <= 1024) {
            v->wg = (uint32_t)n;
        } else {
            CLLM_LOG_WARN("vulkan: CLLM_VULKAN_WG=%s is ignored (1 .. %u)", wg,
                          CLLM_MIN(v->props.limits.maxComputeWorkGroupSize[0], 1024u));
        }
    }

    const float prio = 1.0f;
    const VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                         .queueFamilyIndex = v->queue_family,
                                         .queueCount = 1,
                                         .pQueuePriorities = &prio};
    const char *exts[3] = {VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME};
    uint32_t n_exts = 1;
    if (v->has_budget) exts[n_exts++] = VK_EXT_MEMORY_BUDGET_EXTENSION_NAME;
    if (v->has_int8) exts[n_exts++] = VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME;
    VkPhysicalDeviceTimelineSemaphoreFeatures tl_on = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES,
        .timelineSemaphore = VK_TRUE};
    VkPhysicalDeviceShaderIntegerDotProductFeatures dot_on = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES,
        .pNext = has_timeline ? &tl_on : NULL,
        .shaderIntegerDotProduct = VK_TRUE};
    const void *features = v->has_int8    ? (const void *)&dot_on
                           : has_timeline ? (const void *)&tl_on
                                          : NULL;
    const VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                                    .pNext = features,
                                    .queueCreateInfoCount = 1,
                                    .pQueueCreateInfos = &qci,
                                    .enabledExtensionCount = n_exts,
                                    .ppEnabledExtensionNames = exts};
    VkResult r = vkCreateDevice(pd, &dci, NULL, &v->d);
    if (r != VK_SUCCESS) {
        CLLM_LOG_WARN("vulkan: %s: no logical device: %s", v->props.deviceName, vk_result_str(r));
        return false;
    }
    vkGetDeviceQueue(v->d, v->queue_family, 0, &v->queue);
    pthread_mutex_init(&v->lock, NULL);

    /* transfers: a command buffer, a fence and the staging buffer */
    const VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                         .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                         .queueFamilyIndex = v->queue_family};
    r = vkCreateCommandPool(v->d, &cpi, NULL, &v->xfer_pool);
    const VkCommandBufferAllocateInfo cai = {.sType =
                                                 VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                             .commandPool = v->xfer_pool,
                                             .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                             .commandBufferCount = 1};
    if (r == VK_SUCCESS) r = vkAllocateCommandBuffers(v->d, &cai, &v->xfer_cb);
    const VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (r == VK_SUCCESS) r = vkCreateFence(v->d, &fci, NULL, &v->xfer_fence);
    if (r == VK_SUCCESS && has_timeline) {
        const VkSemaphoreTypeCreateInfo sti = {.sType =
                                                   VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                               .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE,
                                               .initialValue = 0};
        const VkSemaphoreCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO,
                                           .pNext = &sti};
        r = vkCreateSemaphore(v->d, &sci, NULL, &v->timeline);
    }
    if (r == VK_SUCCESS) r = vk_async_init(v);
    if (r == VK_SUCCESS && !v->mapped) {
        const VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                                        .size = VK_STAGING_BYTES,
                                        .usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                                 VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                        .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
        r = vkCreateBuffer(v->d, &bci, NULL, &v->staging);
        VkMemoryRequirements req;
        if (r == VK_SUCCESS) {
            vkGetBufferMemoryRequirements(v->d, v->staging, &req);
            const VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                             .allocationSize = req.size,
                                             .memoryTypeIndex = v->staging_type};
            r = vkAllocateMemory(v->d, &ai, NULL, &v->staging_mem);
        }
        if (r == VK_SUCCESS) r = vkBindBufferMemory(v->d, v->staging, v->staging_mem, 0);
        if (r == VK_SUCCESS) {
            r = vkMapMemory(v->d, v->staging_mem, 0, VK_WHOLE_SIZE, 0, &v->staging_map);
        }
    }
    if (r != VK_SUCCESS) {
        CLLM_LOG_WARN("vulkan: %s: cannot set up transfers: %s", v->props.deviceName,
                      vk_result_str(r));
        return false; /* the process keeps what was made: the module is never unloaded */
    }

    const uint32_t api = v->props.apiVersion;
    char alloc_s[32], range_s[32];
    cllm_format_size((size_t)v->max_alloc, alloc_s, sizeof(alloc_s));
    cllm_format_size(v->props.limits.maxStorageBufferRange, range_s, sizeof(range_s));
    snprintf(v->desc, sizeof(v->desc),
             "%s (%s; driver %s %s; Vulkan %u.%u.%u; subgroup %u; max allocation %s, max "
             "storage range %s; memory %s%s%s)%s",
             v->props.deviceName, type_str(v->props.deviceType), drv.driverName, drv.driverInfo,
             VK_API_VERSION_MAJOR(api), VK_API_VERSION_MINOR(api), VK_API_VERSION_PATCH(api),
             v->subgroup_size, alloc_s, range_s, v->mapped ? "mapped" : "staged",
             v->has_budget ? ", budget" : "",
             v->has_int8 ? (v->int8 ? "; int8 dot products" : "; int8 dot products (off)") : "",
             v->software ? "; software: used only when named (--mem NAME=SIZE)" : "");
    v->buft = (cllm_buffer_type){.iface =
                                     {
                                         .get_name = vk_buft_get_name,
                                         .alloc_buffer = vk_buft_alloc,
                                         .get_alignment = vk_buft_get_alignment,
                                         .get_max_size = vk_buft_get_max_size,
                                         .get_alloc_size = NULL, /* exactly their bytes */
                                         .is_host = vk_buft_is_host,
                                     },
                                 .device = &v->dev,
                                 .context = v};
    v->dev = (cllm_device){.iface = k_vk_device_iface, .reg = &g_vk_reg, .context = v};
    return true;
}

/* Opens the loader and finds the devices, once. No loader, no instance or
 * no usable device: no device (logged at info level), not an error. */
static void vk_discover(void) {
    if (g_vk.init) return;
    g_vk.init = true;
    g_vk.lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!g_vk.lib) {
        CLLM_LOG_INFO("vulkan: no Vulkan loader (libvulkan.so.1: Debian's libvulkan1)");
        return;
    }
    void *sym = dlsym(g_vk.lib, "vkGetInstanceProcAddr");
    memcpy(&vkGetInstanceProcAddr, &sym, sizeof(sym)); /* ISO C: no object-to-function cast */
    if (!vkGetInstanceProcAddr) return;
#define VK_LOAD(name) name = (PFN_##name)vkGetInstanceProcAddr(NULL, #name);
    VK_GLOBAL_FUNCS(VK_LOAD)
#undef VK_LOAD
    if (!vkCreateInstance || !vkEnumerateInstanceLayerProperties) return;
    if (instance_init(env_on("CLLM_VULKAN_VALIDATE")) != CLLM_OK) {
        CLLM_LOG_INFO("%s", cllm_last_error());
        return;
    }
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(g_vk.instance, &n, NULL);
    VkPhysicalDevice pds[VK_MAX_DEVICES];
    n = CLLM_MIN(n, (uint32_t)VK_MAX_DEVICES);
    if (n) vkEnumeratePhysicalDevices(g_vk.instance, &n, pds);
    for (uint32_t i = 0; i < n; i++) {
        if (device_init(&g_vk.devs[g_vk.n_devices], pds[i], g_vk.n_devices)) g_vk.n_devices++;
    }
}

/* ---- registry ---------------------------------------------------------- */

static const char *vk_reg_get_name(const cllm_backend_reg *reg) {
    CLLM_UNUSED(reg);
    return VK_REG_NAME;
}

static int vk_reg_get_device_count(const cllm_backend_reg *reg) {
    CLLM_UNUSED(reg);
    return g_vk.n_devices;
}

static cllm_device *vk_reg_get_device(cllm_backend_reg *reg, int i) {
    CLLM_UNUSED(reg);
    return i >= 0 && i < g_vk.n_devices ? &g_vk.devs[i].dev : NULL;
}

static cllm_status vk_reg_set_params(cllm_backend_reg *reg, const char *params) {
    CLLM_UNUSED(reg);
    return vk_mem_set_params(g_vk.devs, g_vk.n_devices, params);
}

static cllm_backend_reg g_vk_reg = {
    CLLM_BACKEND_REG_ABI,
    .iface =
        {
            .get_name = vk_reg_get_name,
            .get_device_count = vk_reg_get_device_count,
            .get_device = vk_reg_get_device,
            .set_params = vk_reg_set_params, /* test knobs of memory (buffer.c) */
        },
    .context = NULL,
};

/* The module's entry point (see backend.h: loadable backends). */
__attribute__((visibility("default"))) cllm_backend_reg *cllm_backend_module_init(void);
cllm_backend_reg *cllm_backend_module_init(void) {
    vk_discover();
    return &g_vk_reg;
}
