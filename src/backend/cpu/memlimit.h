/*
 * The memory a process may use under its memory cgroups, which the CPU
 * device's free and total memory honour (cpu.c): a container or a systemd
 * slice limits a process far below the machine's MemAvailable, and a plan
 * made from the machine's figures is then OOM-killed.
 *
 * cgroup v2: memory.max and memory.high (each "max" = none), less
 * memory.current; cgroup v1: memory.limit_in_bytes less memory.usage_in_bytes.
 * The file cache a cgroup could drop (inactive_file of memory.stat) counts
 * as available, as MemAvailable counts it. The process's own cgroup and
 * every one above it: the tightest wins.
 *
 * The cgroup file systems are looked for where systems mount them:
 * /sys/fs/cgroup (v2, or v1 with memory/ and unified/ beside), the
 * process's cgroups read from /proc/self/cgroup. The environment variable
 * CLLM_CGROUP_ROOT names another folder laid out as /sys/fs/cgroup, with
 * the lines of /proc/self/cgroup in its file proc-self-cgroup (tests).
 */
#ifndef CLLM_BACKEND_CPU_MEMLIMIT_H
#define CLLM_BACKEND_CPU_MEMLIMIT_H

#include <stdbool.h>
#include <stddef.h>

/* False when no memory cgroup limits the process (or none can be read);
 * else true with the tightest limit in *limit and what is left under it in
 * *avail (<= *limit). */
bool cllm_cgroup_memory(size_t *limit, size_t *avail);

#endif /* CLLM_BACKEND_CPU_MEMLIMIT_H */
