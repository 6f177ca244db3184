/*
 * The commands of the cllm tool, one file each (cmd-<name>.c). Each returns
 * the process exit status: 0 on success, 1 on an error (after printing one
 * line naming the file and the problem), 2 on bad usage.
 */
#ifndef CLLM_TOOLS_COMMANDS_H
#define CLLM_TOOLS_COMMANDS_H

int cllm_cmd_run(int argc, char **argv);
int cllm_cmd_info(int argc, char **argv);
int cllm_cmd_devices(int argc, char **argv);
int cllm_cmd_plan(int argc, char **argv);
int cllm_cmd_bench(int argc, char **argv);
int cllm_cmd_perplexity(int argc, char **argv);

/* --test-device SPEC: enables the test device (0, or 2 after printing why). */
int cllm_cli_enable_test_device(const char *cmd, const char *spec);

#endif /* CLLM_TOOLS_COMMANDS_H */
