/* Static layout: tensors placed back to back, aligned, in one buffer. */
#include "alloc/layout.h"

static bool is_laid_out(const cllm_tensor *t) { return t->data == NULL && t->view_src == NULL; }

size_t cllm_layout_measure(cllm_context *ctx, cllm_buffer_type *buft) {
    const size_t align = cllm_buffer_type_alignment(buft);
    size_t offset = 0;
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        const cllm_tensor *t = cllm_context_tensor(ctx, i);
        if (!is_laid_out(t)) continue;
        const size_t size = cllm_buffer_type_alloc_size(buft, t);
        offset = cllm_buffer_type_place_offset(buft, cllm_align_up(offset, align), size) + size;
    }
    return offset;
}

static void place_all(cllm_context *ctx, cllm_buffer *buf) {
    const size_t align = cllm_buffer_type_alignment(cllm_buffer_buft(buf));
    const int n = cllm_context_n_tensors(ctx);
    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        cllm_tensor *t = cllm_context_tensor(ctx, i);
        if (!is_laid_out(t)) continue;
        const size_t size = cllm_buffer_type_alloc_size(cllm_buffer_buft(buf), t);
        offset = cllm_buffer_type_place_offset(cllm_buffer_buft(buf), cllm_align_up(offset, align),
                                               size);
        cllm_buffer_place_tensor(buf, t, offset);
        offset += size;
    }
    /* views after all sources: a view may be created before its source is placed */
    for (int i = 0; i < n; i++) {
        cllm_tensor *t = cllm_context_tensor(ctx, i);
        if (t->view_src && t->data == NULL && cllm_buffer_holds(buf, t->view_src->buffer))
            cllm_tensor_init_view(t);
    }
}

/* A tensor larger than one piece of the buffer type cannot be placed. */
static cllm_status check_pieces(cllm_context *ctx, cllm_buffer_type *buft) {
    const size_t piece = cllm_buffer_type_piece_size(buft);
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        const cllm_tensor *t = cllm_context_tensor(ctx, i);
        const size_t size = cllm_buffer_type_alloc_size(buft, t);
        if (is_laid_out(t) && size > piece) {
            return cllm_error(CLLM_ERR_TOO_LARGE,
                              "layout: %s (%zu bytes) exceeds the %zu-byte allocations of %s",
                              t->name, size, piece, cllm_buffer_type_name(buft));
        }
    }
    return CLLM_OK;
}

cllm_status cllm_layout_alloc(cllm_context *ctx, cllm_buffer_type *buft, cllm_mem_kind kind,
                              cllm_buffer **out) {
    CLLM_TRY(check_pieces(ctx, buft));
    cllm_buffer *buf = NULL;
    cllm_status st = cllm_buffer_type_alloc(buft, cllm_layout_measure(ctx, buft), kind, &buf);
    if (st != CLLM_OK) return st;
    place_all(ctx, buf);
    *out = buf;
    return CLLM_OK;
}

cllm_status cllm_layout_measure_place(cllm_context *ctx, cllm_buffer_type *buft,
                                      cllm_buffer **out) {
    CLLM_TRY(check_pieces(ctx, buft));
    cllm_buffer *buf = cllm_buffer_new_measure(buft, cllm_layout_measure(ctx, buft));
    if (!buf) return cllm_error(CLLM_ERR_NOMEM, "layout: out of host memory");
    place_all(ctx, buf);
    *out = buf;
    return CLLM_OK;
}
