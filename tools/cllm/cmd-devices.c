/* cllm devices: the devices found at run time, their kind and memory. */
#include "cllm.h"
#include "commands.h"

#include <stdio.h>
#include <string.h>

/* --test-device SPEC (a debug option shared by devices, plan and run):
 * enables the test device with the given options (see test-backend.h). */
int cllm_cli_enable_test_device(const char *cmd, const char *spec) {
    if (cllm_device_enable_test(spec) != CLLM_OK) {
        fprintf(stderr, "cllm %s: --test-device: %s\n", cmd, cllm_last_error());
        return 2;
    }
    return 0;
}

int cllm_cmd_devices(int argc, char **argv) {
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--test-device") && i + 1 < argc) {
            const int rc = cllm_cli_enable_test_device("devices", argv[++i]);
            if (rc) return rc;
        } else {
            fprintf(stderr, "cllm devices: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    const int n = cllm_device_count();
    if (json)
        printf("[");
    else
        printf("  %-10s %-6s %12s %12s  %s\n", "device", "kind", "free", "total", "description");
    for (int i = 0; i < n; i++) {
        cllm_device *d = cllm_device_get(i);
        size_t fr = 0, tot = 0;
        cllm_device_memory(d, &fr, &tot);
        if (json) {
            printf("%s\n {\"name\": \"%s\", \"kind\": \"%s\", \"free\": %zu, \"total\": %zu}",
                   i ? "," : "", cllm_device_name(d), cllm_device_kind_str(cllm_device_kind_of(d)),
                   fr, tot);
        } else {
            char a[32], b[32];
            printf("  %-10s %-6s %12s %12s  %s\n", cllm_device_name(d),
                   cllm_device_kind_str(cllm_device_kind_of(d)), cllm_format_size(fr, a, sizeof(a)),
                   cllm_format_size(tot, b, sizeof(b)), cllm_device_description(d));
        }
    }
    if (json) printf("\n]\n");
    return 0;
}
