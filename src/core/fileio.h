/*
 * Files the library writes, replaced whole or not at all: the bytes go to a
 * new file beside the target (same directory, so the same file system),
 * which is flushed, synced, renamed over the target, and the directory
 * synced. A full disk, a file-size limit or a kill at any moment leaves the
 * old file as it was (or no file, if there was none) — never a mix.
 *
 *     cllm_safe_file sf;
 *     CLLM_TRY(cllm_safe_file_open(&sf, "out.gguf"));
 *     ... fwrite(..., sf.f) ...; on the first failed write keep its errno ...
 *     return cllm_safe_file_commit(&sf, err);   // or cllm_safe_file_abort(&sf)
 *
 * A new file gets mode 0666 less the umask, a replaced one keeps its mode.
 * Errors name the file and the system's reason (strerror).
 */
#ifndef CLLM_CORE_FILEIO_H
#define CLLM_CORE_FILEIO_H

#include "core/common.h"

#include <stdio.h>

typedef struct cllm_safe_file {
    FILE *f;    /* write here */
    char *path; /* the target */
    char *tmp;  /* the file written, renamed to path on commit */
} cllm_safe_file;

/* Creates the temporary file beside `path`. On failure nothing is left. */
cllm_status cllm_safe_file_open(cllm_safe_file *sf, const char *path);

/*
 * Flushes, syncs and closes the temporary file, renames it over the target
 * and syncs the directory. `write_errno`: the errno of a failed write the
 * caller saw (0 if none; then an error flag on sf->f still fails). On any
 * failure the temporary file is removed and the target left untouched.
 * Frees sf's members either way.
 */
cllm_status cllm_safe_file_commit(cllm_safe_file *sf, int write_errno);

/* Removes the temporary file and frees sf's members. */
void cllm_safe_file_abort(cllm_safe_file *sf);

#endif /* CLLM_CORE_FILEIO_H */
