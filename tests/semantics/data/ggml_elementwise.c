/* ggml-cpu's own element-wise ops on float32 rows, for the tests of strata's numpy kernels:
 * each function builds a one-op ggml graph over the caller's arrays and computes it on one
 * thread with the llama.cpp build's libggml-cpu. Rows are ggml's ne0 (the last numpy dim). */
#include <math.h>
#include <string.h>

#include "ggml.h"
#include "ggml-cpu.h"

static struct ggml_context * new_context(size_t floats) {
    struct ggml_init_params params = {floats * sizeof(float) * 4 + 16 * ggml_tensor_overhead() + ggml_graph_overhead(),
                                      NULL, false};
    return ggml_init(params);
}

static struct ggml_tensor * input(struct ggml_context * ctx, const float * data, long ne0, long ne1, long ne2) {
    struct ggml_tensor * t = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, ne0, ne1, ne2);
    memcpy(t->data, data, ggml_nbytes(t));
    return t;
}

static void compute(struct ggml_context * ctx, struct ggml_tensor * out, float * dst) {
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    ggml_graph_compute_with_ctx(ctx, gf, 1);
    memcpy(dst, out->data, ggml_nbytes(out));
    ggml_free(ctx);
}

void elementwise_rms_norm(const float * x, long ne0, long rows, float eps, float * y) {
    struct ggml_context * ctx = new_context(2 * ne0 * rows);
    compute(ctx, ggml_rms_norm(ctx, input(ctx, x, ne0, rows, 1), eps), y);
}

void elementwise_silu(const float * x, long ne0, long rows, float * y) {
    struct ggml_context * ctx = new_context(2 * ne0 * rows);
    compute(ctx, ggml_silu(ctx, input(ctx, x, ne0, rows, 1)), y);
}

void elementwise_swiglu(const float * g, const float * u, long ne0, long rows, float * y) {
    struct ggml_context * ctx = new_context(3 * ne0 * rows);
    compute(ctx, ggml_swiglu_split(ctx, input(ctx, g, ne0, rows, 1), input(ctx, u, ne0, rows, 1)), y);
}

void elementwise_soft_max(const float * x, long ne0, long rows, float scale, float * y) {
    struct ggml_context * ctx = new_context(2 * ne0 * rows);
    compute(ctx, ggml_soft_max_ext(ctx, input(ctx, x, ne0, rows, 1), NULL, scale, 0.0f), y);
}

/* x [seq][heads][head_dim] (ggml's ne0 = head_dim, ne1 = heads, ne2 = seq), pos [seq] */
void elementwise_rope(const float * x, const int * pos, long head_dim, long heads, long seq, int n_dims, int mode,
                      float freq_base, float freq_scale, float * y) {
    struct ggml_context * ctx = new_context(2 * head_dim * heads * seq + seq);
    struct ggml_tensor * p = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, seq);
    memcpy(p->data, pos, seq * sizeof(int));
    compute(ctx, ggml_rope_ext(ctx, input(ctx, x, head_dim, heads, seq), p, NULL, n_dims, mode, 0, freq_base, freq_scale,
                               0.0f, 1.0f, 0.0f, 0.0f), y);
}

/* the C library's expf, which ggml-cpu calls outside its vector loops (flash attention, leftovers) */
void libm_expf(const float * x, long n, float * y) {
    for (long i = 0; i < n; i++) {
        y[i] = expf(x[i]);
    }
}
