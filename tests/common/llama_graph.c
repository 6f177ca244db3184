/* A llama-shaped forward graph (see llama_graph.h). */
#include "common/llama_graph.h"
#include "alloc/layout.h"
#include "backend/cpu/cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

llama_graph_params llama_graph_params_default(void) {
    return (llama_graph_params){
        .n_embd = 2048,
        .n_head = 32,
        .n_head_kv = 4,
        .n_ff = 5632,
        .n_layer = 22,
        .n_vocab = 32000,
        .n_ctx = 2048,
        .wtype = CLLM_TYPE_F16,
        .kvtype = CLLM_TYPE_F16,
        .fused_attn = true,
        .rms_eps = 1e-5f,
        .rope_base = 10000.0f,
    };
}

static bool params_ok(const llama_graph_params *p) {
    const cllm_type_traits *wt = cllm_type_traits_of(p->wtype);
    const cllm_type_traits *kt = cllm_type_traits_of(p->kvtype);
    return wt && kt && p->n_layer >= 1 && p->n_head >= 1 && p->n_head_kv >= 1 &&
           p->n_head % p->n_head_kv == 0 && p->n_embd % p->n_head == 0 &&
           (p->n_embd / p->n_head) % 2 == 0 && p->n_embd % wt->blck_size == 0 &&
           p->n_ff % wt->blck_size == 0 && p->n_ff >= 1 && p->n_vocab >= 1 && p->n_ctx >= 1 &&
           p->n_layer <= 1000;
}

void llama_model_free(llama_model_fixture *m) {
    cllm_buffer_free(m->wbuf);
    cllm_buffer_free(m->sbuf);
    cllm_context_free(m->wctx);
    cllm_context_free(m->sctx);
    free(m->layers);
    memset(m, 0, sizeof(*m));
}

cllm_status llama_model_init(llama_model_fixture *m, const llama_graph_params *p, bool measure) {
    memset(m, 0, sizeof(*m));
    if (!params_ok(p)) return cllm_error(CLLM_ERR_INVALID_ARG, "llama_graph: bad parameters");
    m->p = *p;
    const int n_layer = (int)p->n_layer;
    const int64_t n_embd = p->n_embd, n_embd_kv = p->n_embd / p->n_head * p->n_head_kv;
    m->wctx = cllm_context_new(3 + 9 * n_layer);
    m->sctx = cllm_context_new(2 * n_layer);
    m->layers = calloc((size_t)n_layer, sizeof(*m->layers));
    if (!m->wctx || !m->sctx || !m->layers) {
        llama_model_free(m);
        return cllm_error(CLLM_ERR_NOMEM, "llama_graph: out of host memory");
    }
    cllm_context *w = m->wctx;
    m->tok_embd = cllm_tensor_new_2d(w, p->wtype, n_embd, p->n_vocab);
    cllm_tensor_set_name(m->tok_embd, "token_embd.weight");
    for (int il = 0; il < n_layer; il++) {
        llama_layer *l = &m->layers[il];
        l->attn_norm = cllm_tensor_new_1d(w, CLLM_TYPE_F32, n_embd);
        l->wq = cllm_tensor_new_2d(w, p->wtype, n_embd, n_embd);
        l->wk = cllm_tensor_new_2d(w, p->wtype, n_embd, n_embd_kv);
        l->wv = cllm_tensor_new_2d(w, p->wtype, n_embd, n_embd_kv);
        l->wo = cllm_tensor_new_2d(w, p->wtype, n_embd, n_embd);
        l->ffn_norm = cllm_tensor_new_1d(w, CLLM_TYPE_F32, n_embd);
        l->w_gate = cllm_tensor_new_2d(w, p->wtype, n_embd, p->n_ff);
        l->w_up = cllm_tensor_new_2d(w, p->wtype, n_embd, p->n_ff);
        l->w_down = cllm_tensor_new_2d(w, p->wtype, p->n_ff, n_embd);
        cllm_tensor_set_name(l->attn_norm, "blk.%d.attn_norm.weight", il);
        cllm_tensor_set_name(l->wq, "blk.%d.attn_q.weight", il);
        cllm_tensor_set_name(l->wk, "blk.%d.attn_k.weight", il);
        cllm_tensor_set_name(l->wv, "blk.%d.attn_v.weight", il);
        cllm_tensor_set_name(l->wo, "blk.%d.attn_output.weight", il);
        cllm_tensor_set_name(l->ffn_norm, "blk.%d.ffn_norm.weight", il);
        cllm_tensor_set_name(l->w_gate, "blk.%d.ffn_gate.weight", il);
        cllm_tensor_set_name(l->w_up, "blk.%d.ffn_up.weight", il);
        cllm_tensor_set_name(l->w_down, "blk.%d.ffn_down.weight", il);
        /* k: (position, kv head, head dim); v likewise, or transposed for
         * unfused attention: (kv head, head dim, position) */
        l->k_cache = cllm_tensor_new_2d(m->sctx, p->kvtype, n_embd_kv, p->n_ctx);
        l->v_cache = p->fused_attn ? cllm_tensor_new_2d(m->sctx, p->kvtype, n_embd_kv, p->n_ctx)
                                   : cllm_tensor_new_2d(m->sctx, p->kvtype, p->n_ctx, n_embd_kv);
        cllm_tensor_set_name(l->k_cache, "cache_k.%d", il);
        cllm_tensor_set_name(l->v_cache, "cache_v.%d", il);
    }
    m->output_norm = cllm_tensor_new_1d(w, CLLM_TYPE_F32, n_embd);
    m->output = cllm_tensor_new_2d(w, p->wtype, n_embd, p->n_vocab);
    cllm_tensor_set_name(m->output_norm, "output_norm.weight");
    cllm_tensor_set_name(m->output, "output.weight");

    cllm_buffer_type *buft = cllm_cpu_buffer_type();
    cllm_status st;
    if (measure) {
        st = cllm_layout_measure_place(m->wctx, buft, &m->wbuf);
        if (st == CLLM_OK) st = cllm_layout_measure_place(m->sctx, buft, &m->sbuf);
    } else {
        st = cllm_layout_alloc(m->wctx, buft, CLLM_MEM_WEIGHTS, &m->wbuf);
        if (st == CLLM_OK) st = cllm_layout_alloc(m->sctx, buft, CLLM_MEM_STATE, &m->sbuf);
    }
    if (st != CLLM_OK) llama_model_free(m);
    return st;
}

void llama_graph_free(llama_graph *lg) {
    cllm_graph_free(lg->graph);
    cllm_context_free(lg->ctx);
    memset(lg, 0, sizeof(*lg));
}

cllm_status llama_graph_build(llama_graph *lg, llama_model_fixture *m, int64_t n_tokens,
                              int64_t n_kv) {
    const llama_graph_params *p = &m->p;
    memset(lg, 0, sizeof(*lg));
    if (n_tokens < 1 || n_kv < n_tokens || n_kv > p->n_ctx) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "llama_graph: %lld tokens, %lld in the cache of %lld",
                          (long long)n_tokens, (long long)n_kv, (long long)p->n_ctx);
    }
    const int cap = (int)(48 * p->n_layer + 64);
    lg->ctx = cllm_context_new(cap);
    lg->graph = cllm_graph_new(cap);
    if (!lg->ctx || !lg->graph) {
        llama_graph_free(lg);
        return cllm_error(CLLM_ERR_NOMEM, "llama_graph: out of host memory");
    }
    lg->n_tokens = n_tokens;
    lg->n_kv = n_kv;
    cllm_context *ctx = lg->ctx;
    cllm_graph *g = lg->graph;

    const int64_t n_embd = p->n_embd, n_head = p->n_head, n_head_kv = p->n_head_kv;
    const int64_t hd = n_embd / n_head, n_embd_kv = hd * n_head_kv;
    const int64_t n_past = n_kv - n_tokens;
    const size_t kv_row = cllm_row_size(p->kvtype, n_embd_kv); /* one position */
    const size_t kv_head = cllm_row_size(p->kvtype, hd);       /* one head of a position */
    const size_t kv_el = cllm_row_size(p->kvtype, 1);
    const size_t vt_row = cllm_row_size(p->kvtype, p->n_ctx); /* transposed v: one channel */
    const float scale = 1.0f / sqrtf((float)hd);

    lg->tokens = cllm_tensor_set_name(cllm_tensor_new_1d(ctx, CLLM_TYPE_I32, n_tokens), "tokens");
    lg->pos = cllm_tensor_set_name(cllm_tensor_new_1d(ctx, CLLM_TYPE_I32, n_tokens), "positions");
    lg->mask = cllm_tensor_set_name(cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, n_kv, n_tokens), "mask");
    cllm_tensor_set_input(lg->tokens);
    cllm_tensor_set_input(lg->pos);
    cllm_tensor_set_input(lg->mask);

    cllm_tensor *x = cllm_get_rows(ctx, m->tok_embd, lg->tokens); /* [n_embd, n_tokens] */
    cllm_tensor_set_name(x, "inp_embd");
    for (int il = 0; il < (int)p->n_layer; il++) {
        const llama_layer *l = &m->layers[il];
        cllm_tensor *cur = cllm_mul(ctx, cllm_rms_norm(ctx, x, p->rms_eps), l->attn_norm);
        cllm_tensor_set_name(cur, "attn_norm.%d", il);

        cllm_tensor *q = cllm_mul_mat(ctx, l->wq, cur); /* [n_embd, n_tokens] */
        cllm_tensor *k = cllm_mul_mat(ctx, l->wk, cur); /* [n_embd_kv, n_tokens] */
        cllm_tensor *v = cllm_mul_mat(ctx, l->wv, cur); /* [n_embd_kv, n_tokens] */
        cllm_tensor_set_name(q, "q.%d", il);
        cllm_tensor_set_name(k, "k.%d", il);
        cllm_tensor_set_name(v, "v.%d", il);
        q = cllm_rope(ctx, cllm_reshape_3d(ctx, q, hd, n_head, n_tokens), lg->pos, NULL, (int)hd,
                      CLLM_ROPE_NORMAL, p->rope_base, 1.0f); /* [hd, n_head, n_tokens] */
        k = cllm_rope(ctx, cllm_reshape_3d(ctx, k, hd, n_head_kv, n_tokens), lg->pos, NULL, (int)hd,
                      CLLM_ROPE_NORMAL, p->rope_base, 1.0f);
        cllm_tensor_set_name(q, "q_rope.%d", il);
        cllm_tensor_set_name(k, "k_rope.%d", il);

        /* store k and v at positions n_past .. n_kv - 1; added to the graph
         * now so that the copies run before the attention reads the cache */
        cllm_tensor *k_dst =
            cllm_view_2d(ctx, l->k_cache, n_embd_kv, n_tokens, kv_row, (size_t)n_past * kv_row);
        cllm_graph_build(g, cllm_cpy(ctx, k, k_dst));
        if (p->fused_attn) {
            cllm_tensor *v_dst =
                cllm_view_2d(ctx, l->v_cache, n_embd_kv, n_tokens, kv_row, (size_t)n_past * kv_row);
            cllm_graph_build(g, cllm_cpy(ctx, v, v_dst));
        } else {
            cllm_tensor *v_dst =
                cllm_view_2d(ctx, l->v_cache, n_tokens, n_embd_kv, vt_row, (size_t)n_past * kv_el);
            cllm_graph_build(g, cllm_cpy(ctx, cllm_transpose(ctx, v), v_dst));
        }

        /* attention over the n_kv cached positions */
        cllm_tensor *qp = cllm_permute(ctx, q, 0, 2, 1, 3); /* [hd, n_tokens, n_head] */
        cllm_tensor *kv_k = cllm_view_3d(ctx, l->k_cache, hd, n_kv, n_head_kv, kv_row, kv_head, 0);
        cllm_tensor *o;
        if (p->fused_attn) {
            cllm_tensor *kv_v =
                cllm_view_3d(ctx, l->v_cache, hd, n_kv, n_head_kv, kv_row, kv_head, 0);
            o = cllm_attn(ctx, qp, kv_k, kv_v, lg->mask, scale); /* [hd, n_head, n_tokens] */
        } else {
            cllm_tensor *kq = cllm_mul_mat(ctx, kv_k, qp); /* [n_kv, n_tokens, n_head] */
            cllm_tensor_set_name(kq, "kq.%d", il);
            kq = cllm_soft_max(ctx, kq, lg->mask, scale);
            cllm_tensor_set_name(kq, "kq_soft_max.%d", il);
            cllm_tensor *kv_vt = cllm_view_3d(ctx, l->v_cache, n_kv, hd, n_head_kv, vt_row,
                                              vt_row * (size_t)hd, 0); /* [n_kv, hd, n_head_kv] */
            cllm_tensor *kqv = cllm_mul_mat(ctx, kv_vt, kq);           /* [hd, n_tokens, n_head] */
            cllm_tensor_set_name(kqv, "kqv.%d", il);
            o = cllm_cont(ctx, cllm_permute(ctx, kqv, 0, 2, 1, 3)); /* [hd, n_head, n_tokens] */
        }
        cllm_tensor_set_name(o, "attn_out.%d", il);
        o = cllm_mul_mat(ctx, l->wo, cllm_reshape_2d(ctx, o, n_embd, n_tokens));
        cllm_tensor_set_name(o, "attn_proj.%d", il);
        x = cllm_add(ctx, o, x);
        cllm_tensor_set_name(x, "ffn_inp.%d", il);

        /* SwiGLU feed-forward */
        cur = cllm_mul(ctx, cllm_rms_norm(ctx, x, p->rms_eps), l->ffn_norm);
        cllm_tensor_set_name(cur, "ffn_norm.%d", il);
        cllm_tensor *gate = cllm_mul_mat(ctx, l->w_gate, cur); /* [n_ff, n_tokens] */
        cllm_tensor *up = cllm_mul_mat(ctx, l->w_up, cur);
        cllm_tensor_set_name(gate, "ffn_gate.%d", il);
        cllm_tensor_set_name(up, "ffn_up.%d", il);
        cur = cllm_mul(ctx, cllm_silu(ctx, gate), up);
        cllm_tensor_set_name(cur, "ffn_act.%d", il);
        cur = cllm_mul_mat(ctx, l->w_down, cur); /* [n_embd, n_tokens] */
        cllm_tensor_set_name(cur, "ffn_down.%d", il);
        x = cllm_add(ctx, cur, x);
        cllm_tensor_set_name(x, "l_out.%d", il);
    }
    cllm_tensor *cur = cllm_mul(ctx, cllm_rms_norm(ctx, x, p->rms_eps), m->output_norm);
    cllm_tensor_set_name(cur, "result_norm");
    cllm_tensor *last_row =
        cllm_view_2d(ctx, cur, n_embd, 1, cur->nb[1], (size_t)(n_tokens - 1) * cur->nb[1]);
    lg->logits = cllm_mul_mat(ctx, m->output, last_row); /* [n_vocab, 1] */
    cllm_tensor_set_name(lg->logits, "logits");
    cllm_tensor_set_output(lg->logits);
    cllm_graph_build(g, lg->logits);
    return CLLM_OK;
}
