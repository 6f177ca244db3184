/*
 * batch: several prompts answered at once by the batch engine. Each prompt
 * is a request; the engine advances all of them in one forward pass per
 * step (continuous batching: a request that ends frees its sequence for
 * the next one), and each answer is printed when it is complete.
 *
 *     cc batch.c $(pkg-config --cflags --libs cllm) -o batch
 *     ./batch model.gguf "Once upon a time" "The dog" "Lily saw a bird"
 */
#include <cllm.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One request's answer, filled by the events. */
typedef struct answer {
    const char *prompt;
    char *text;
    size_t len;
    size_t n_tokens;
    bool done;
} answer;

static void on_event(const cllm_event *ev, void *user_data) {
    (void)user_data;
    answer *a = ev->user_data; /* given to cllm_engine_submit */
    if (ev->kind == CLLM_EVENT_TEXT) {
        char *grown = realloc(a->text, a->len + ev->len + 1);
        if (!grown) return;
        memcpy(grown + a->len, ev->text, ev->len);
        a->text = grown;
        a->len += ev->len;
        a->text[a->len] = '\0';
    } else if (ev->kind == CLLM_EVENT_FINISHED) {
        a->done = true;
        a->n_tokens = ev->usage.n_completion;
        printf("[%s]%s (%zu tokens, %s)\n\n", a->prompt, a->text ? a->text : "", a->n_tokens,
               cllm_stop_reason_str(ev->reason));
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT...\n", argv[0]);
        return 2;
    }
    const int n = argc - 2;
    cllm_model *model = NULL;
    cllm_engine *engine = NULL;
    answer *answers = calloc((size_t)n, sizeof(*answers));
    int rc = 1;
    if (!answers || cllm_model_load(argv[1], NULL, &model) != CLLM_OK) goto done;

    cllm_session_params sp = cllm_session_default_params();
    sp.n_seq = n < 4 ? n : 4; /* at most four requests run at a time; the others wait */
    sp.n_ctx = 512;           /* per sequence */
    if (cllm_engine_new(model, &sp, on_event, NULL, &engine) != CLLM_OK) goto done;

    cllm_request_params rp = cllm_request_default_params();
    rp.sampling.temperature = 0; /* greedy: the answer each prompt gets alone */
    rp.max_tokens = 48;
    const char *stop[] = {"\n\n"};
    rp.stop = stop, rp.n_stop = 1;
    for (int i = 0; i < n; i++) {
        int32_t ids[256];
        size_t n_ids = 0;
        answers[i].prompt = argv[i + 2];
        if (cllm_tokenize(model, argv[i + 2], strlen(argv[i + 2]), true, false, ids, 256, &n_ids) !=
                CLLM_OK ||
            cllm_engine_submit(engine, ids, n_ids, &rp, &answers[i], NULL) != CLLM_OK) {
            goto done;
        }
    }
    /* the caller's thread steps the engine; the events come from here */
    while (cllm_engine_n_waiting(engine) + cllm_engine_n_running(engine) > 0) {
        if (cllm_engine_step(engine) != CLLM_OK) goto done;
    }
    rc = 0;
done:
    if (rc) fprintf(stderr, "batch: %s\n", cllm_last_error());
    for (int i = 0; answers && i < n; i++) free(answers[i].text);
    free(answers);
    cllm_engine_free(engine);
    cllm_model_free(model);
    return rc;
}
