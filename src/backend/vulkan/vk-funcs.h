/* The Vulkan functions the backend calls, loaded at run time from the
 * loader that vulkan.c opens (dlopen of libvulkan.so.1), so that neither
 * the library nor the module links Vulkan. One X-macro list:
 * VK_FN(name) for every function, fetched through vkGetInstanceProcAddr
 * once the instance exists (VK_GLOBAL_FN: before it). */
#ifndef CLLM_BACKEND_VULKAN_VK_FUNCS_H
#define CLLM_BACKEND_VULKAN_VK_FUNCS_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#define VK_GLOBAL_FUNCS(X)                                                                         \
    X(vkCreateInstance)                                                                            \
    X(vkEnumerateInstanceLayerProperties)                                                          \
    X(vkEnumerateInstanceExtensionProperties)

#define VK_INSTANCE_FUNCS(X)                                                                       \
    X(vkDestroyInstance)                                                                           \
    X(vkEnumeratePhysicalDevices)                                                                  \
    X(vkGetPhysicalDeviceProperties)                                                               \
    X(vkGetPhysicalDeviceProperties2)                                                              \
    X(vkGetPhysicalDeviceFeatures2)                                                                \
    X(vkGetPhysicalDeviceMemoryProperties)                                                         \
    X(vkGetPhysicalDeviceMemoryProperties2)                                                        \
    X(vkGetPhysicalDeviceQueueFamilyProperties)                                                    \
    X(vkEnumerateDeviceExtensionProperties)                                                        \
    X(vkCreateDevice)                                                                              \
    X(vkDestroyDevice)                                                                             \
    X(vkDeviceWaitIdle)                                                                            \
    X(vkGetDeviceQueue)                                                                            \
    X(vkCreateBuffer)                                                                              \
    X(vkDestroyBuffer)                                                                             \
    X(vkGetBufferMemoryRequirements)                                                               \
    X(vkAllocateMemory)                                                                            \
    X(vkFreeMemory)                                                                                \
    X(vkBindBufferMemory)                                                                          \
    X(vkMapMemory)                                                                                 \
    X(vkUnmapMemory)                                                                               \
    X(vkCreateShaderModule)                                                                        \
    X(vkDestroyShaderModule)                                                                       \
    X(vkCreateDescriptorSetLayout)                                                                 \
    X(vkDestroyDescriptorSetLayout)                                                                \
    X(vkCreatePipelineLayout)                                                                      \
    X(vkDestroyPipelineLayout)                                                                     \
    X(vkCreateComputePipelines)                                                                    \
    X(vkDestroyPipeline)                                                                           \
    X(vkCreateCommandPool)                                                                         \
    X(vkDestroyCommandPool)                                                                        \
    X(vkAllocateCommandBuffers)                                                                    \
    X(vkBeginCommandBuffer)                                                                        \
    X(vkEndCommandBuffer)                                                                          \
    X(vkResetCommandBuffer)                                                                        \
    X(vkCmdBindPipeline)                                                                           \
    X(vkCmdPushConstants)                                                                          \
    X(vkCmdDispatch)                                                                               \
    X(vkCmdPipelineBarrier)                                                                        \
    X(vkCmdCopyBuffer)                                                                             \
    X(vkCmdFillBuffer)                                                                             \
    X(vkQueueSubmit)                                                                               \
    X(vkCreateFence)                                                                               \
    X(vkDestroyFence)                                                                              \
    X(vkWaitForFences)                                                                             \
    X(vkResetFences)                                                                               \
    X(vkCreateSemaphore)                                                                           \
    X(vkDestroySemaphore)

/* Extension functions (NULL where the extension is absent), and those of
 * Vulkan 1.2 (timeline semaphores: used only where the device has them). */
#define VK_EXT_FUNCS(X)                                                                            \
    X(vkCmdPushDescriptorSetKHR)                                                                   \
    X(vkWaitSemaphores)                                                                            \
    X(vkGetSemaphoreCounterValue)                                                                  \
    X(vkCreateDebugUtilsMessengerEXT)                                                              \
    X(vkDestroyDebugUtilsMessengerEXT)

#endif /* CLLM_BACKEND_VULKAN_VK_FUNCS_H */
