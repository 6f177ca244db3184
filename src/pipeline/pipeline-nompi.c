/* The pipeline's transport in a build without MPI: it says so. */
#include "cllm-pipeline.h"
#include "core/common.h"

#include <stdlib.h>

#define NO_MPI                                                                                     \
    cllm_error(CLLM_ERR_UNSUPPORTED, "pipeline: this cllm was built without MPI (see README: "     \
                                     "-DCLLM_MPI=ON with Open MPI installed)")

bool cllm_pipe_have_mpi(void) { return false; }
bool cllm_pipe_launched(void) {
    const char *v = getenv("OMPI_COMM_WORLD_SIZE");
    if (!v) v = getenv("PMI_SIZE");
    return v && atoi(v) > 1;
}
cllm_status cllm_pipe_init(int *argc, char ***argv) {
    (void)argc, (void)argv;
    return NO_MPI;
}
void cllm_pipe_finalize(bool failed) { (void)failed; }
bool cllm_pipe_any_thread(void) { return false; }
cllm_pipe_opts cllm_pipe_default_opts(void) {
    return (cllm_pipe_opts){.timeout_s = 120.0, .idle_forever = false, .quiet = false};
}
cllm_status cllm_pipe_open(const char *path, const cllm_plan_params *fp, const cllm_pipe_opts *opts,
                           cllm_pipe **out) {
    (void)fp, (void)opts;
    if (!path || !out) return CLLM_NULL_ARG("path or out");
    return NO_MPI;
}
int cllm_pipe_rank(const cllm_pipe *p) { return (void)p, 0; }
int cllm_pipe_size(const cllm_pipe *p) { return p ? 1 : 0; }
const cllm_pipe_plan *cllm_pipe_get_plan(const cllm_pipe *p) { return (void)p, NULL; }
cllm_model *cllm_pipe_model(cllm_pipe *p) { return (void)p, NULL; }
cllm_session *cllm_pipe_session(cllm_pipe *p) { return (void)p, NULL; }
int cllm_pipe_n_seq(const cllm_pipe *p) { return (void)p, 0; }
cllm_status cllm_pipe_serve(cllm_pipe *p) { return p ? NO_MPI : CLLM_NULL_ARG("the pipeline"); }
cllm_status cllm_pipe_close(cllm_pipe *p) { return p ? NO_MPI : CLLM_NULL_ARG("the pipeline"); }
double cllm_pipe_comm_seconds(const cllm_pipe *p) { return (void)p, 0.0; }
uint64_t cllm_pipe_bytes_sent(const cllm_pipe *p) { return (void)p, 0; }
cllm_status cllm_pipe_gather_stats(cllm_pipe *p, cllm_pipe_stats *out) {
    (void)out;
    if (!p) return CLLM_NULL_ARG("the pipeline");
    return NO_MPI;
}
cllm_status cllm_pipe_measure_transfer(cllm_pipe *p, size_t bytes, int reps, double *one_way_s) {
    (void)bytes, (void)reps, (void)one_way_s;
    if (!p) return CLLM_NULL_ARG("the pipeline");
    return NO_MPI;
}
void cllm_pipe_free(cllm_pipe *p) { (void)p; }
