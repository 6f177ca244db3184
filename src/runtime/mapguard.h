/*
 * Mapped weights whose file shrinks under them. Reading a page of a file
 * mapping past the file's end raises SIGBUS, which by default kills the
 * process without a word. The model registers the range of its mapping
 * here; a handler of SIGBUS then finds the faulting address in a
 * registered range, maps zero pages over the rest of that range (so the
 * computation in progress completes, with wrong numbers), and raises the
 * range's flag, which the model turns into an error of every later pass
 * (model.c: cllm_model_check). A SIGBUS anywhere else goes to the handler
 * that was there before, or kills the process as it would have.
 *
 *     CLLM_TRY(cllm_mapguard_add(map, size, &m->faulted));
 *     ...
 *     cllm_mapguard_remove(map);   // before munmap
 *
 * The handler is installed with the first range (sigaction; SA_SIGINFO)
 * and stays. A program that installs its own SIGBUS handler afterwards
 * takes these faults over.
 */
#ifndef CLLM_RUNTIME_MAPGUARD_H
#define CLLM_RUNTIME_MAPGUARD_H

#include "core/common.h"

/* Guards [addr, addr + size); *faulted becomes 1 when a read there faults.
 * CLLM_ERR_TOO_LARGE when every slot is taken (CLLM_MAPGUARD_MAX ranges),
 * CLLM_ERR_BACKEND when the handler cannot be installed. Thread-safe. */
#define CLLM_MAPGUARD_MAX 64
cllm_status cllm_mapguard_add(void *addr, size_t size, _Atomic int *faulted);

/* Stops guarding the range that starts at addr (NULL or unknown: nothing). */
void cllm_mapguard_remove(void *addr);

/* Faults handled since the process started (tests). */
long cllm_mapguard_faults(void);

#endif /* CLLM_RUNTIME_MAPGUARD_H */
