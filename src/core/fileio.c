/* Files replaced whole or not at all (fileio.h). */
#include "core/fileio.h"
#include "core/hostmem.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void safe_file_free(cllm_safe_file *sf) {
    cllm_free(sf->path);
    cllm_free(sf->tmp);
    sf->f = NULL;
    sf->path = sf->tmp = NULL;
}

cllm_status cllm_safe_file_open(cllm_safe_file *sf, const char *path) {
    *sf = (cllm_safe_file){0};
    if (!path || !*path) return cllm_error(CLLM_ERR_INVALID_ARG, "safe write: no file name");
    /* a link is followed: the file it names is the one replaced */
    char real[PATH_MAX];
    bool linked = false;
    struct stat sb;
    const bool exists = stat(path, &sb) == 0;
    if (exists && !S_ISREG(sb.st_mode)) {
        return cllm_error(CLLM_ERR_IO, "%s: not a regular file (cannot be replaced)", path);
    }
    struct stat lb;
    if (exists && lstat(path, &lb) == 0 && S_ISLNK(lb.st_mode)) {
        linked = realpath(path, real) != NULL;
    }
    sf->path = cllm_strdup(linked ? real : path);
    const size_t len = sf->path ? strlen(sf->path) : 0;
    sf->tmp = sf->path ? cllm_malloc(len + 32) : NULL;
    if (!sf->tmp) {
        safe_file_free(sf);
        return cllm_error(CLLM_ERR_NOMEM, "%s: out of host memory", path);
    }
    static _Atomic unsigned g_seq;
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 100; tries++) {
        snprintf(sf->tmp, len + 32, "%s.tmp-%ld-%u", sf->path, (long)getpid(),
                 atomic_fetch_add(&g_seq, 1));
        fd = open(sf->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        const cllm_status st =
            cllm_error(CLLM_ERR_IO, "%s: cannot create %s: %s", path, sf->tmp, strerror(errno));
        safe_file_free(sf);
        return st;
    }
    if (exists) (void)fchmod(fd, sb.st_mode & 07777); /* the replaced file's mode */
    sf->f = fdopen(fd, "wb");
    if (!sf->f) {
        const int err = errno;
        close(fd);
        unlink(sf->tmp);
        const cllm_status st = cllm_error(CLLM_ERR_IO, "%s: %s", path, strerror(err));
        safe_file_free(sf);
        return st;
    }
    return CLLM_OK;
}

void cllm_safe_file_abort(cllm_safe_file *sf) {
    if (sf->f) fclose(sf->f);
    if (sf->tmp) unlink(sf->tmp);
    safe_file_free(sf);
}

/* Syncs the directory that holds `path` (the rename's entry). */
static int sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    if (!slash) {
        snprintf(dir, sizeof(dir), ".");
    } else if (slash == path) {
        snprintf(dir, sizeof(dir), "/");
    } else {
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    }
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno;
    /* some file systems cannot sync a directory: nothing more to do there */
    const int err = fsync(fd) != 0 && errno != EINVAL && errno != EROFS ? errno : 0;
    close(fd);
    return err;
}

cllm_status cllm_safe_file_commit(cllm_safe_file *sf, int write_errno) {
    int err = write_errno;
    const char *what = "writing";
    if (!err && fflush(sf->f) != 0) err = errno;
    if (!err && ferror(sf->f)) err = EIO; /* a failed write the caller did not see */
    if (!err && fsync(fileno(sf->f)) != 0) what = "syncing", err = errno;
    if (fclose(sf->f) != 0 && !err) err = errno;
    sf->f = NULL;
    if (!err && rename(sf->tmp, sf->path) != 0) what = "renaming the new file over", err = errno;
    if (err) {
        unlink(sf->tmp);
        const cllm_status st = cllm_error(CLLM_ERR_IO, "%s: %s failed (the file is unchanged): %s",
                                          sf->path, what, strerror(err));
        safe_file_free(sf);
        return st;
    }
    const int derr = sync_dir(sf->path);
    cllm_status st = CLLM_OK;
    if (derr) {
        st = cllm_error(CLLM_ERR_IO, "%s: written, but syncing its directory failed: %s", sf->path,
                        strerror(derr));
    }
    safe_file_free(sf);
    return st;
}

cllm_status cllm_file_write(const char *path, const void *data, size_t size) {
    if (!path) return CLLM_NULL_ARG("path");
    if (!data && size) return CLLM_NULL_ARG("data");
    cllm_safe_file sf;
    CLLM_TRY(cllm_safe_file_open(&sf, path));
    errno = 0;
    const int err = size && fwrite(data, 1, size, sf.f) != size ? (errno ? errno : EIO) : 0;
    return cllm_safe_file_commit(&sf, err);
}
