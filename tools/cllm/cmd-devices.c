/* cllm devices: the devices found at run time, their kind and memory. */
#include "cllm.h"
#include "commands.h"

#include <stdio.h>
#include <string.h>

/* --test-device SPEC (a debug option shared by devices, plan and run):
 * enables the test device with the given options (see test-backend.h). */
int cli_enable_test_device(const char *cmd, const char *spec) {
    if (cllm_device_enable_test(spec) != CLLM_OK) {
        cli_error(cmd, "--test-device: %s", cllm_last_error());
        return 2;
    }
    return 0;
}

static void devices_usage(FILE *f) {
    fprintf(f, "usage: cllm devices [--json]\n"
               "\n"
               "Lists the devices found: name, kind, free and total memory, description.\n"
               "\n"
               "  --json               one JSON array\n"
               "  --test-device SPEC   enable the test device (debug; e.g. budget=64MiB)\n"
               "  -h, --help           this help\n");
}

int cli_cmd_devices(int argc, char **argv) {
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            devices_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--test-device")) {
            const char *v = cli_value("devices", argc, argv, &i);
            if (!v) return 2;
            const int rc = cli_enable_test_device("devices", v);
            if (rc) return rc;
        } else {
            cli_error("devices", "unknown option '%s' (see cllm devices --help)", argv[i]);
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
        const char *name = cllm_device_name(d), *desc = cllm_device_description(d);
        if (json) {
            printf("%s\n {\"name\": ", i ? "," : "");
            cli_json_str(stdout, name, strlen(name));
            printf(", \"kind\": \"%s\", \"free\": %zu, \"total\": %zu, \"description\": ",
                   cllm_device_kind_str(cllm_device_kind_of(d)), fr, tot);
            cli_json_str(stdout, desc, strlen(desc));
            printf("}");
        } else {
            char a[32], b[32], nm[64];
            cllm_escape(nm, sizeof(nm), name, strlen(name), CLLM_ESCAPE_TEXT);
            printf("  %-10s %-6s %12s %12s  ", nm, cllm_device_kind_str(cllm_device_kind_of(d)),
                   cllm_format_size(fr, a, sizeof(a)), cllm_format_size(tot, b, sizeof(b)));
            cllm_escape_fputs(stdout, desc, strlen(desc), CLLM_ESCAPE_TEXT);
            putchar('\n');
        }
    }
    if (json) printf("\n]\n");
    return 0;
}
