/*
 * simple: load a model, tokenize a prompt, generate 32 tokens greedily,
 * print the text and the generated ids, free everything.
 *
 *     cc simple.c $(pkg-config --cflags --libs cllm) -o simple
 *     ./simple model.gguf "Once upon a time"
 */
#include <cllm.h>

#include <stdio.h>
#include <string.h>

static bool print_text(int32_t id, const char *text, size_t len, void *user_data) {
    (void)id, (void)user_data;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return true; /* false would stop the generation */
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [PROMPT]\n", argv[0]);
        return 2;
    }
    const char *prompt = argc > 2 ? argv[2] : "Once upon a time";
    cllm_model *model = NULL;
    cllm_session *session = NULL;
    cllm_sampler *sampler = NULL;
    cllm_generate_result res = {0};
    int32_t ids[512];
    size_t n_ids = 0;
    int rc = 1;

    if (cllm_model_load(argv[1], NULL, &model) != CLLM_OK) goto done;
    if (cllm_tokenize(model, prompt, strlen(prompt), true, false, ids, 512, &n_ids) != CLLM_OK)
        goto done;
    if (cllm_session_new(model, NULL, &session) != CLLM_OK) goto done;

    cllm_sampler_params sp = cllm_sampler_default_params();
    sp.temperature = 0.0f; /* greedy */
    if (cllm_sampler_new(&sp, cllm_model_n_vocab(model), &sampler) != CLLM_OK) goto done;

    printf("%s", prompt);
    if (cllm_generate(session, sampler, ids, n_ids, 32, print_text, NULL, &res) != CLLM_OK)
        goto done;
    printf("\ngenerated_ids:");
    for (size_t i = 0; i < res.n_ids; i++) printf(" %d", res.ids[i]);
    printf("\n");
    rc = 0;
done:
    if (rc) fprintf(stderr, "simple: %s\n", cllm_last_error());
    cllm_generate_result_free(&res);
    cllm_sampler_free(sampler);
    cllm_session_free(session);
    cllm_model_free(model);
    return rc;
}
