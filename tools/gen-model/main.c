/*
 * cllm-gen-model — writes a llama, qwen2, qwen3, phi3, gemma3 or gpt2 GGUF with
 * random weights, of any shape and weight type, with the project's own GGUF
 * writer. Tests use small ones (references from llama.cpp on the same file);
 * benchmarks use the shapes of real models, since speed does not depend on
 * the values.
 *
 *   cllm-gen-model --arch llama --vocab VOCAB.gguf --out FILE [options]
 *
 *   --arch A           llama (default), qwen2 (q/k/v biases), qwen3 (q/k
 *                      norms), phi3 (fused attn_qkv and gate|up ffn_up),
 *                      gemma3 (q/k norms, post-block norms, --swa), gpt2
 *
 *   --preset NAME      tinyllama-1.1b | llama-7b | tiny (sets the shape)
 *   --n-embd N --n-layer N --n-head N --n-head-kv N --n-ff N --n-ctx N
 *   --type T           f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0,
 *                      q2_k, q3_k, q4_k, q5_k, q6_k (matrices; norms and
 *                      biases stay f32)
 *   --seed S           weights are a function of the seed alone
 *   --tied             no output.weight (tied to token_embd)
 *   --head-dim N       head size (default n_embd / n_head; qwen3 often differs)
 *   --rope-base F      rope.freq_base (default 10000)
 *   --yarn F N         rope.scaling.type yarn, factor F, original context N
 *   --longrope N       phi3: rope_factors_short/_long (random, 1 to 4) and
 *                      rope.scaling.original_context_length N,
 *                      rope.scaling.attn_factor 1.1
 *   --qk-std F         standard deviation of the q and k weights (default
 *                      0.02, as every matrix); larger values make attention
 *                      peaked, so that positions (rope) change the logits
 *   --llama3-rope N    rope_freqs.weight with Llama 3.1's frequency factors
 *                      for an original context of N (Llama 3.1: 8192; factor
 *                      8, low 1, high 4); a small N scales the frequencies
 *                      that the positions of short test prompts reach
 *   --swa N            gemma3: sliding window of N positions on the local
 *                      layers (every layer but each 6th; 0: none)
 *   --zeros            write zero bytes instead of random weights: seconds
 *                      instead of minutes for big shapes (for `cllm plan`
 *                      and I/O tests; compute on it is meaningless)
 *
 * The vocabulary (tokenizer.* keys) is copied from VOCAB.gguf, e.g. the
 * fixtures in tests/data/models/vocab; n_vocab is its token count.
 */
#include "core/types.h"
#include "gguf/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct opts {
    const char *arch, *vocab, *out;
    int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx, head_dim, n_swa;
    cllm_type type;
    uint64_t seed;
    double rope_base, qk_std;
    int64_t llama3_rope; /* original context; 0: no rope_freqs */
    double yarn_factor;  /* 0: no YaRN */
    int64_t yarn_orig, longrope;
    bool tied, zeros;
} opts;

/* Llama 3.1's rope frequency factors (its converter's formula): each
 * frequency's wavelength decides whether it is kept (short), divided by
 * `factor` (long) or blended between the two. */
static float *llama3_factors(int64_t n_rot, double base, double n_orig) {
    const double factor = 8.0, low = 1.0, high = 4.0;
    const double low_wavelen = n_orig / low, high_wavelen = n_orig / high;
    float *f = malloc((size_t)(n_rot / 2) * sizeof(float));
    if (!f) return NULL;
    for (int64_t i = 0; i < n_rot / 2; i++) {
        const double freq = 1.0 / pow(base, (double)(2 * i) / (double)n_rot);
        const double wavelen = 2.0 * 3.141592653589793 / freq;
        if (wavelen < high_wavelen) {
            f[i] = 1.0f;
        } else if (wavelen > low_wavelen) {
            f[i] = (float)factor;
        } else {
            const double smooth = (n_orig / wavelen - low) / (high - low);
            f[i] = (float)(1.0 / ((1.0 - smooth) / factor + smooth));
        }
    }
    return f;
}

/* splitmix64 -> uniform -> Box-Muller normals */
static uint64_t g_rng;
static bool g_zeros;
static uint64_t next_u64(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static double uniform(void) { return ((double)(next_u64() >> 11) + 0.5) * 0x1.0p-53; }
static float normal(void) {
    return (float)(sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform()));
}

/* Tensor data kept until the file is written. */
typedef struct blob {
    void *data;
    struct blob *next;
} blob;
static blob *g_blobs;

static void *keep(void *p) {
    blob *b = malloc(sizeof(*b));
    if (!b || !p) {
        fprintf(stderr, "cllm-gen-model: out of memory\n");
        exit(1);
    }
    b->data = p;
    b->next = g_blobs;
    g_blobs = b;
    return p;
}

static void add(cllm_gguf_writer *w, const char *name, cllm_type type, int64_t ne0, int64_t ne1,
                float scale, float offset) {
    const int64_t ne[2] = {ne0, ne1};
    if (g_zeros) { /* the writer writes zeros for NULL data */
        if (cllm_gguf_writer_add_tensor(w, name, type, ne1 > 1 ? 2 : 1, ne, NULL) != CLLM_OK) {
            fprintf(stderr, "cllm-gen-model: %s\n", cllm_last_error());
            exit(1);
        }
        return;
    }
    const int64_t n = ne0 * ne1;
    float *f = malloc((size_t)n * sizeof(float));
    if (!f) keep(NULL);
    for (int64_t i = 0; i < n; i++) f[i] = offset + scale * normal();
    const void *data = f;
    if (type != CLLM_TYPE_F32) {
        const cllm_type_traits *tt = cllm_type_traits_of(type);
        char *q = malloc(cllm_row_size(type, ne0) * (size_t)ne1);
        if (!q) keep(NULL);
        for (int64_t r = 0; r < ne1; r++) {
            tt->from_float(f + r * ne0, q + (size_t)r * cllm_row_size(type, ne0), ne0);
        }
        free(f);
        data = q;
    }
    keep((void *)data);
    if (cllm_gguf_writer_add_tensor(w, name, type, ne1 > 1 ? 2 : 1, ne, data) != CLLM_OK) {
        fprintf(stderr, "cllm-gen-model: %s\n", cllm_last_error());
        exit(1);
    }
}

static cllm_type parse_type(const char *s) {
    for (int t = 0; t < CLLM_TYPE_COUNT; t++) {
        const cllm_type_traits *tt = cllm_type_traits_of((cllm_type)t);
        if (tt && tt->from_float && strcmp(tt->name, s) == 0 && t != CLLM_TYPE_Q8_K &&
            t != CLLM_TYPE_Q8_1) {
            return (cllm_type)t;
        }
    }
    fprintf(stderr, "cllm-gen-model: unknown weight type '%s'\n", s);
    exit(2);
}

/* Sets the shape only (n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx). */
static void preset(opts *o, const char *name) {
    static const struct {
        const char *name;
        int64_t embd, layer, head, head_kv, ff, ctx;
    } k[] = {
        {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 2048},
        {"llama-7b", 4096, 32, 32, 32, 11008, 4096},
        {"tiny", 256, 2, 4, 2, 512, 512},
    };
    for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
        if (strcmp(name, k[i].name) != 0) continue;
        o->n_embd = k[i].embd, o->n_layer = k[i].layer, o->n_head = k[i].head;
        o->n_head_kv = k[i].head_kv, o->n_ff = k[i].ff, o->n_ctx = k[i].ctx;
        return;
    }
    fprintf(stderr, "cllm-gen-model: unknown preset '%s'\n", name);
    exit(2);
}

static int64_t arg_int(const char *s) {
    char *end;
    const long long v = strtoll(s, &end, 10);
    if (*end || v <= 0) {
        fprintf(stderr, "cllm-gen-model: bad number '%s'\n", s);
        exit(2);
    }
    return v;
}

/* Copies the tokenizer.* keys of the vocabulary file; returns n_vocab. */
static int64_t copy_vocab(cllm_gguf_writer *w, const char *path) {
    cllm_gguf *g = NULL;
    if (cllm_gguf_open(path, &g) != CLLM_OK) {
        fprintf(stderr, "cllm-gen-model: %s\n", cllm_last_error());
        exit(1);
    }
    int64_t n_vocab = 0;
    const int64_t k = cllm_gguf_find_key(g, "tokenizer.ggml.tokens");
    if (k >= 0 && cllm_gguf_kv_type(g, k) == CLLM_GGUF_ARRAY)
        n_vocab = (int64_t)cllm_gguf_arr_n(g, k);
    for (int64_t i = 0; i < cllm_gguf_n_kv(g); i++) {
        const char *key = cllm_gguf_key(g, i);
        if (strncmp(key, "tokenizer.", 10) != 0) continue;
        cllm_status st = CLLM_OK;
        switch (cllm_gguf_kv_type(g, i)) {
        case CLLM_GGUF_STRING:
            st = cllm_gguf_writer_set_str(w, key, cllm_gguf_val_str(g, i));
            break;
        case CLLM_GGUF_UINT32:
            st = cllm_gguf_writer_set_u32(w, key, cllm_gguf_val_u32(g, i));
            break;
        case CLLM_GGUF_INT32: st = cllm_gguf_writer_set_i32(w, key, cllm_gguf_val_i32(g, i)); break;
        case CLLM_GGUF_BOOL:
            st = cllm_gguf_writer_set_bool(w, key, cllm_gguf_val_bool(g, i));
            break;
        case CLLM_GGUF_ARRAY:
            if (cllm_gguf_arr_type(g, i) == CLLM_GGUF_STRING) {
                const uint64_t n = cllm_gguf_arr_n(g, i);
                const char **strs = malloc((size_t)n * sizeof(*strs));
                if (!strs) keep(NULL);
                for (uint64_t j = 0; j < n; j++) strs[j] = cllm_gguf_arr_str(g, i, j, NULL);
                st = cllm_gguf_writer_set_arr_str(w, key, strs, n);
                free(strs);
            } else {
                st = cllm_gguf_writer_set_arr(w, key, cllm_gguf_arr_type(g, i),
                                              cllm_gguf_arr_data(g, i), cllm_gguf_arr_n(g, i));
            }
            break;
        default: break; /* other scalar types do not occur in tokenizer keys */
        }
        if (st != CLLM_OK) {
            fprintf(stderr, "cllm-gen-model: %s\n", cllm_last_error());
            exit(1);
        }
    }
    cllm_gguf_free(g);
    if (n_vocab <= 0) {
        fprintf(stderr, "cllm-gen-model: %s has no tokenizer.ggml.tokens\n", path);
        exit(1);
    }
    return n_vocab;
}

int main(int argc, char **argv) {
    opts o = {
        .arch = "llama", .type = CLLM_TYPE_F32, .seed = 1, .rope_base = 10000.0, .qk_std = 0.02};
    preset(&o, "tiny");
    bool rope_base_given = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--tied") || !strcmp(a, "--zeros")) {
            *(a[2] == 't' ? &o.tied : &o.zeros) = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "cllm-gen-model: '%s' needs a value (see the header of main.c)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--arch"))
            o.arch = v;
        else if (!strcmp(a, "--vocab"))
            o.vocab = v;
        else if (!strcmp(a, "--out"))
            o.out = v;
        else if (!strcmp(a, "--preset"))
            preset(&o, v);
        else if (!strcmp(a, "--n-embd"))
            o.n_embd = arg_int(v);
        else if (!strcmp(a, "--n-layer"))
            o.n_layer = arg_int(v);
        else if (!strcmp(a, "--n-head"))
            o.n_head = arg_int(v);
        else if (!strcmp(a, "--n-head-kv"))
            o.n_head_kv = arg_int(v);
        else if (!strcmp(a, "--n-ff"))
            o.n_ff = arg_int(v);
        else if (!strcmp(a, "--n-ctx"))
            o.n_ctx = arg_int(v);
        else if (!strcmp(a, "--type"))
            o.type = parse_type(v);
        else if (!strcmp(a, "--head-dim"))
            o.head_dim = arg_int(v);
        else if (!strcmp(a, "--yarn") && i + 1 < argc) {
            o.yarn_factor = atof(v);
            o.yarn_orig = arg_int(argv[++i]);
        } else if (!strcmp(a, "--longrope"))
            o.longrope = arg_int(v);
        else if (!strcmp(a, "--llama3-rope"))
            o.llama3_rope = arg_int(v);
        else if (!strcmp(a, "--qk-std"))
            o.qk_std = atof(v);
        else if (!strcmp(a, "--rope-base"))
            o.rope_base = atof(v), rope_base_given = true;
        else if (!strcmp(a, "--swa"))
            o.n_swa = arg_int(v);
        else if (!strcmp(a, "--seed"))
            o.seed = (uint64_t)arg_int(v);
        else {
            fprintf(stderr, "cllm-gen-model: unknown option '%s'\n", a);
            return 2;
        }
    }
    const bool gpt2 = !strcmp(o.arch, "gpt2"), qwen2 = !strcmp(o.arch, "qwen2");
    const bool qwen3 = !strcmp(o.arch, "qwen3"), phi3 = !strcmp(o.arch, "phi3");
    const bool gemma3 = !strcmp(o.arch, "gemma3");
    if (!o.out || !o.vocab ||
        (!gpt2 && !qwen2 && !qwen3 && !phi3 && !gemma3 && strcmp(o.arch, "llama"))) {
        fprintf(stderr, "usage: cllm-gen-model --arch llama|qwen2|qwen3|phi3|gemma3|gpt2 --vocab "
                        "VOCAB.gguf --out FILE "
                        "[--preset NAME] [--type T] [--seed S] [shape options]\n");
        return 2;
    }
    const int64_t blck = cllm_type_traits_of(o.type)->blck_size;
    if (o.n_embd % blck || o.n_ff % blck || o.n_embd % o.n_head || o.n_head % o.n_head_kv) {
        fprintf(stderr,
                "cllm-gen-model: n_embd %lld and n_ff %lld must be multiples of %lld (%s), "
                "n_embd of n_head, n_head of n_head_kv\n",
                (long long)o.n_embd, (long long)o.n_ff, (long long)blck, cllm_type_name(o.type));
        return 2;
    }
    if (!o.head_dim) o.head_dim = o.n_embd / o.n_head;
    if (gpt2 && o.head_dim != o.n_embd / o.n_head) {
        fprintf(stderr, "cllm-gen-model: gpt2 heads are n_embd / n_head\n");
        return 2;
    }
    g_rng = o.seed;
    g_zeros = o.zeros;

    cllm_gguf_writer *w = cllm_gguf_writer_new();
    if (!w) keep(NULL);
    const int64_t n_vocab = copy_vocab(w, o.vocab);
    const char *A = o.arch;
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof(key), "%s.%s", A, suffix), key)
    cllm_gguf_writer_set_str(w, "general.architecture", A);
    cllm_gguf_writer_set_str(w, "general.name", "cllm random weights");
    cllm_gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)o.n_ctx);
    cllm_gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)o.n_embd);
    cllm_gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)o.n_layer);
    cllm_gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)o.n_ff);
    cllm_gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)o.n_head);
    if (gpt2) {
        cllm_gguf_writer_set_f32(w, KEY("attention.layer_norm_epsilon"), 1e-5f);
    } else {
        cllm_gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)o.n_head_kv);
        cllm_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
        /* gemma3: the global layers' base (1e6 unless --rope-base); the local
         * ones keep 10000 */
        cllm_gguf_writer_set_f32(w, KEY("rope.freq_base"),
                                 gemma3 && !rope_base_given ? 1000000.0f : (float)o.rope_base);
        cllm_gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)o.head_dim);
        if (o.yarn_factor > 0) {
            cllm_gguf_writer_set_str(w, KEY("rope.scaling.type"), "yarn");
            cllm_gguf_writer_set_f32(w, KEY("rope.scaling.factor"), (float)o.yarn_factor);
            cllm_gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"),
                                     (uint32_t)o.yarn_orig);
        }
        if (o.longrope) {
            cllm_gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"),
                                     (uint32_t)o.longrope);
            cllm_gguf_writer_set_f32(w, KEY("rope.scaling.attn_factor"), 1.1f);
        }
        if (o.head_dim != o.n_embd / o.n_head) {
            cllm_gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)o.head_dim);
            cllm_gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)o.head_dim);
        }
    }
    if (gemma3) {
        cllm_gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)(o.n_embd / o.n_head));
        cllm_gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)(o.n_embd / o.n_head));
        if (o.n_swa > 0) {
            cllm_gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)o.n_swa);
        }
    }
#undef KEY

    const int64_t E = o.n_embd, F = o.n_ff, hd = o.head_dim, KV = hd * o.n_head_kv;
    const int64_t Q = hd * o.n_head;
    const cllm_type T = o.type, F32 = CLLM_TYPE_F32;
    const float ws = 0.02f, ns = 0.1f; /* matrix std, norm noise */
    add(w, "token_embd.weight", T, E, n_vocab, 1.0f, 0.0f);
    if (gpt2) add(w, "position_embd.weight", F32, E, o.n_ctx, 0.1f, 0.0f);
    if (o.longrope) { /* factors uniform in [1, 4), from the seed */
        static const char *const names[] = {"rope_factors_long.weight",
                                            "rope_factors_short.weight"};
        for (int k = 0; k < 2; k++) {
            float *f = keep(malloc((size_t)(hd / 2) * sizeof(float)));
            for (int64_t i = 0; i < hd / 2; i++) f[i] = 1.0f + 3.0f * (float)uniform();
            if (cllm_gguf_writer_add_tensor(w, names[k], F32, 1, (int64_t[]){hd / 2}, f) !=
                CLLM_OK) {
                fprintf(stderr, "cllm-gen-model: %s\n", cllm_last_error());
                return 1;
            }
        }
    }
    if (o.llama3_rope) {
        float *f = keep(llama3_factors(hd, o.rope_base, (double)o.llama3_rope));
        if (cllm_gguf_writer_add_tensor(w, "rope_freqs.weight", F32, 1, (int64_t[]){hd / 2}, f) !=
            CLLM_OK) {
            fprintf(stderr, "cllm-gen-model: %s\n", cllm_last_error());
            return 1;
        }
    }
    char name[96];
    for (int64_t l = 0; l < o.n_layer; l++) {
#define N(s) (snprintf(name, sizeof(name), "blk.%lld.%s", (long long)l, s), name)
        add(w, N("attn_norm.weight"), F32, E, 1, ns, 1.0f);
        if (gpt2) {
            add(w, N("attn_norm.bias"), F32, E, 1, ns, 0.0f);
            add(w, N("attn_qkv.weight"), T, E, 3 * E, ws, 0.0f);
            add(w, N("attn_qkv.bias"), F32, 3 * E, 1, ns, 0.0f);
            add(w, N("attn_output.weight"), T, E, E, ws, 0.0f);
            add(w, N("attn_output.bias"), F32, E, 1, ns, 0.0f);
            add(w, N("ffn_norm.weight"), F32, E, 1, ns, 1.0f);
            add(w, N("ffn_norm.bias"), F32, E, 1, ns, 0.0f);
            add(w, N("ffn_up.weight"), T, E, F, ws, 0.0f);
            add(w, N("ffn_up.bias"), F32, F, 1, ns, 0.0f);
            add(w, N("ffn_down.weight"), T, F, E, ws, 0.0f);
            add(w, N("ffn_down.bias"), F32, E, 1, ns, 0.0f);
        } else if (phi3) {
            add(w, N("attn_qkv.weight"), T, E, Q + 2 * KV, (float)o.qk_std, 0.0f);
            add(w, N("attn_output.weight"), T, Q, E, ws, 0.0f);
            add(w, N("ffn_norm.weight"), F32, E, 1, ns, 1.0f);
            add(w, N("ffn_up.weight"), T, E, 2 * F, ws, 0.0f);
            add(w, N("ffn_down.weight"), T, F, E, ws, 0.0f);
        } else {
            add(w, N("attn_q.weight"), T, E, Q, (float)o.qk_std, 0.0f);
            add(w, N("attn_k.weight"), T, E, KV, (float)o.qk_std, 0.0f);
            add(w, N("attn_v.weight"), T, E, KV, ws, 0.0f);
            if (qwen2) {
                add(w, N("attn_q.bias"), F32, Q, 1, ns, 0.0f);
                add(w, N("attn_k.bias"), F32, KV, 1, ns, 0.0f);
                add(w, N("attn_v.bias"), F32, KV, 1, ns, 0.0f);
            }
            if (qwen3) {
                add(w, N("attn_q_norm.weight"), F32, hd, 1, ns, 1.0f);
                add(w, N("attn_k_norm.weight"), F32, hd, 1, ns, 1.0f);
            }
            add(w, N("attn_output.weight"), T, Q, E, ws, 0.0f);
            if (gemma3) {
                add(w, N("attn_q_norm.weight"), F32, hd, 1, ns, 1.0f);
                add(w, N("attn_k_norm.weight"), F32, hd, 1, ns, 1.0f);
                add(w, N("post_attention_norm.weight"), F32, E, 1, ns, 1.0f);
                add(w, N("post_ffw_norm.weight"), F32, E, 1, ns, 1.0f);
            }
            add(w, N("ffn_norm.weight"), F32, E, 1, ns, 1.0f);
            add(w, N("ffn_gate.weight"), T, E, F, ws, 0.0f);
            add(w, N("ffn_up.weight"), T, E, F, ws, 0.0f);
            add(w, N("ffn_down.weight"), T, F, E, ws, 0.0f);
        }
#undef N
    }
    add(w, "output_norm.weight", F32, E, 1, ns, 1.0f);
    if (gpt2) add(w, "output_norm.bias", F32, E, 1, ns, 0.0f);
    if (!o.tied) add(w, "output.weight", T, E, n_vocab, ws, 0.0f);

    const cllm_status st = cllm_gguf_writer_write(w, o.out);
    cllm_gguf_writer_free(w);
    while (g_blobs) {
        blob *next = g_blobs->next;
        free(g_blobs->data);
        free(g_blobs);
        g_blobs = next;
    }
    if (st != CLLM_OK) {
        fprintf(stderr, "cllm-gen-model: %s\n", cllm_last_error());
        return 1;
    }
    return 0;
}
