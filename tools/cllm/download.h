/*
 * Models by name: GGUF files from a Hugging Face hub (or a server with the
 * same URL layout) into the cache, and the SHA-256 that checks them.
 *
 *     const char *path = NULL;
 *     if (!cli_model_from_hf("run", "user/repo:Q4_K_M", &path)) return 1;
 *     // path: $CLLM_CACHE/models/hf/user/repo/<file>.gguf, downloaded if needed
 *
 * The hub is $HF_ENDPOINT (default https://huggingface.co), with
 * $HF_TOKEN as a bearer token when set. Downloads need libcurl and jansson
 * at build time; without them the functions print that and fail.
 */
#ifndef CLLM_TOOLS_DOWNLOAD_H
#define CLLM_TOOLS_DOWNLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- SHA-256 (FIPS 180-4) ------------------------------------------------ */

typedef struct cli_sha256 {
    uint32_t h[8];
    uint64_t n;      /* bytes hashed */
    uint8_t buf[64]; /* the block being filled: n % 64 bytes of it */
} cli_sha256;

void cli_sha256_init(cli_sha256 *s);
void cli_sha256_update(cli_sha256 *s, const void *data, size_t len);
/* The digest as 64 lowercase hex digits and a NUL; s is spent. */
void cli_sha256_hex(cli_sha256 *s, char out[65]);

/* ---- the cache ------------------------------------------------------------ */

/* $CLLM_CACHE, else $XDG_CACHE_HOME/cllm, else $HOME/.cache/cllm (new
 * string), or NULL after printing that none is set. */
char *cli_cache_dir(const char *cmd);

/* ---- the hub ---------------------------------------------------------------- */

/* -hf, -hfr, --hf-repo: the option that names a model of the hub. */
bool cli_is_hf_option(const char *o);

/*
 * REPO[:QUANT] ("user/name:Q4_K_M"; QUANT may also be a file name ending in
 * .gguf) into the cache: the GGUF file of the repository whose name holds
 * QUANT (case-insensitive; without QUANT: Q4_K_M, else Q4_0, else Q8_0,
 * else the first), downloaded unless the cache holds it with the hub's
 * SHA-256 already. A split file (-00001-of-0000N.gguf) brings all its
 * parts, joined into one file named without the -00001-of-0000N
 * (cli_gguf_join; the parts removed unless keep_parts); a joined file in
 * the cache is used as it is. On a terminal a progress bar goes to stderr.
 * The path of the file in paths[0, *n) (*n is 1; new strings; free each
 * and the array). False after printing the problem.
 */
bool cli_hf_pull(const char *cmd, const char *spec, bool keep_parts, char ***paths, int *n);

/*
 * After a command's options: where -hf SPEC was given (hf != NULL), the
 * model's path in the cache (downloaded if needed) into *model, which must
 * not be set (-m and -hf both: an error). The path lives until the process
 * ends. hf == NULL: true, *model untouched. False after printing.
 */
bool cli_model_from_hf(const char *cmd, const char *hf, const char **model);

/*
 * The same for a command that takes -m and -hf alone: 0 with *model set;
 * 2 after printing that neither or both were given; 1 after printing why
 * the download failed.
 */
int cli_model_arg(const char *cmd, const char *hf, const char **model);

/* ---- split GGUF files ------------------------------------------------------ */

/* The part number and count of a split GGUF file's name
 * (NAME-00001-of-00003.gguf); false for a whole file. */
bool cli_split_name(const char *path, int *no, int *count);
/* The joined file's name of the first part `first` (NAME.gguf; a new
 * string), or NULL when `first` is not a part's name or memory ran out. */
char *cli_split_joined_name(const char *first);

/*
 * The split file whose first part is `first` (NAME-00001-of-0000N.gguf)
 * written as the one GGUF file `out`: the first part's metadata without
 * split.no, split.count and split.tensors.count, then every part's tensors
 * in order, their data streamed from the parts (mapped, not read whole),
 * aligned as general.alignment says. Each part must carry split.no (0-based)
 * and split.count matching its name, the tensor names must be unique and
 * their count must be split.tensors.count. `out` is written beside itself
 * and renamed once complete and synced, so a failure leaves no partial
 * file. The parts are removed afterwards unless keep_parts. Prints what it
 * did on stderr; false after printing the problem (naming the file).
 */
bool cli_gguf_join(const char *cmd, const char *first, const char *out, bool keep_parts);

#endif /* CLLM_TOOLS_DOWNLOAD_H */
