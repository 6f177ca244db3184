/*
 * chat: a minimal multi-turn chat over stdin lines. One session keeps its KV
 * cache between turns: each turn renders the whole conversation with the
 * model's chat template, and only the text after what the session already
 * holds is tokenized and decoded.
 *
 *     cc chat.c $(pkg-config --cflags --libs cllm) -o chat
 *     printf 'Hi!\nTell me a story.\n' | ./chat model.gguf [STYLE]
 *
 * STYLE (chatml, llama2, llama3, gemma, zephyr) overrides the template, for
 * models whose file has none.
 */
#include <cllm.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TURNS 64

typedef struct reply {
    char *text;
    size_t len;
} reply;

static bool on_text(int32_t id, const char *text, size_t len, void *user_data) {
    (void)id;
    reply *r = user_data;
    char *grown = realloc(r->text, r->len + len + 1);
    if (!grown) return false;
    memcpy(grown + r->len, text, len);
    r->text = grown;
    r->len += len;
    r->text[r->len] = 0;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return true;
}

/* A copy of text (strdup is not C11). */
static char *dup_str(const char *text) {
    char *p = malloc(strlen(text) + 1);
    return p ? strcpy(p, text) : NULL;
}

/* Tokenizes text (control tokens parsed) into a new array *ids. */
static cllm_status tokenize_all(const cllm_model *m, const char *text, bool add_special,
                                int32_t **ids, size_t *n_ids) {
    size_t n = 0;
    cllm_status st = cllm_tokenize(m, text, strlen(text), add_special, true, NULL, 0, &n);
    if (st != CLLM_OK) return st;
    int32_t *buf = malloc((n + 1) * sizeof(*buf));
    if (!buf) return CLLM_ERR_NOMEM;
    st = cllm_tokenize(m, text, strlen(text), add_special, true, buf, n + 1, &n);
    if (st != CLLM_OK) {
        free(buf);
        return st;
    }
    *ids = buf;
    *n_ids = n;
    return CLLM_OK;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [STYLE] < lines\n", argv[0]);
        return 2;
    }
    const char *style_name = argc > 2 ? argv[2] : NULL;
    cllm_model *m = NULL;
    cllm_session *s = NULL;
    cllm_sampler *smp = NULL;
    cllm_chat_msg msgs[2 * MAX_TURNS];
    size_t n_msgs = 0;
    char *held = NULL; /* the text whose tokens the session holds */
    char line[4096];
    int rc = 1;

    if (cllm_model_load(argv[1], NULL, &m) != CLLM_OK) goto done;
    if (cllm_session_new(m, NULL, &s) != CLLM_OK) goto done;
    cllm_sampler_params sp = cllm_sampler_default_params();
    if (cllm_sampler_new(&sp, cllm_model_n_vocab(m), &smp) != CLLM_OK) goto done;

    while (n_msgs + 2 <= 2 * MAX_TURNS && fgets(line, sizeof(line), stdin)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0]) continue;
        msgs[n_msgs++] = (cllm_chat_msg){.role = "user", .content = dup_str(line)};
        char *text = NULL;
        cllm_chat_style style;
        if (cllm_chat_apply(m, style_name, msgs, n_msgs, true, &text, NULL, &style) != CLLM_OK)
            goto done;
        /* only what follows the held text is new; else start over */
        const size_t n_held = held ? strlen(held) : 0;
        const bool cont = held && cllm_session_n_past(s) > 0 && !strncmp(text, held, n_held);
        if (!cont && cllm_session_truncate(s, 0) != CLLM_OK) goto done;
        int32_t *ids = NULL;
        size_t n_ids = 0;
        const bool add_bos = !cont && !cllm_chat_style_has_bos_text(style);
        if (tokenize_all(m, cont ? text + n_held : text, add_bos, &ids, &n_ids) != CLLM_OK)
            goto done;

        fprintf(stderr, "[%s: %zu new tokens after %lld]\n", cont ? "continued" : "new", n_ids,
                (long long)cllm_session_n_past(s));
        reply r = {0};
        cllm_generate_result res;
        printf("assistant: ");
        const cllm_status st = cllm_generate(s, smp, ids, n_ids, 128, on_text, &r, &res);
        free(ids);
        printf("\n");
        if (st != CLLM_OK) {
            free(text);
            free(r.text);
            goto done;
        }
        /* the session holds every reply token but possibly the last: add it */
        if (res.n_gen_decoded < res.n_ids &&
            cllm_session_decode(s, res.ids + res.n_gen_decoded,
                                (int64_t)(res.n_ids - res.n_gen_decoded)) != CLLM_OK) {
            res.stop = CLLM_STOP_CONTEXT_FULL;
        }
        const bool full = res.stop == CLLM_STOP_CONTEXT_FULL;
        cllm_generate_result_free(&res);
        msgs[n_msgs++] =
            (cllm_chat_msg){.role = "assistant", .content = r.text ? r.text : dup_str("")};
        free(held);
        held = malloc(strlen(text) + r.len + 1);
        if (!held) goto done;
        sprintf(held, "%s%s", text, r.text ? r.text : "");
        free(text);
        if (full) {
            fprintf(stderr, "chat: the context is full; starting a new conversation\n");
            while (n_msgs) free((char *)msgs[--n_msgs].content);
            cllm_session_reset(s);
        }
    }
    rc = 0;
done:
    if (rc) fprintf(stderr, "chat: %s\n", cllm_last_error());
    while (n_msgs) free((char *)msgs[--n_msgs].content);
    free(held);
    cllm_sampler_free(smp);
    cllm_session_free(s);
    cllm_model_free(m);
    return rc;
}
