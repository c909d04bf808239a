// adamw.cu: one AdamW step over a flat parameter buffer, in place (one variant, "fused").
//
// With t = *step >= 1, the bias corrections computed here on the device in float32:
//     bc1 = 1 / (1 - beta1^t),  bc2 = 1 / (1 - beta2^t)
//     scale = grad_scale * min(1, max_norm / sqrt(*grad_sumsq))   (clipping: has_sumsq and max_norm > 0)
//     g = grad * scale;  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//     param -= lr * (m bc1 / (sqrt(v bc2) + eps) + weight_decay * param)
//     param_copy = param rounded to copyT                          (has_copy: the 16-bit working copy)
// If sqrt(*grad_sumsq) is not finite (has_sumsq), nothing is written: the step is skipped.
//
// lr, step and grad_sumsq are read through pointers, so a captured CUDA graph replays with the
// values the core writes into those (1,) float32 arrays before each replay; the host launcher
// puts plain Python numbers into a small array of its own. Defines: paramT (param, grad, m, v) and
// copyT (param_copy). Each element is read once and written once: the minimum traffic.
#include "common.cuh"

// grid-stride, any grid
extern "C" __global__ void adamw_update(paramT* __restrict__ param, const paramT* __restrict__ grad,
                                        paramT* __restrict__ m, paramT* __restrict__ v, copyT* __restrict__ param_copy,
                                        const float* __restrict__ lr_ptr, const float* __restrict__ step_ptr,
                                        const float* __restrict__ grad_sumsq, long long n, float beta1, float beta2,
                                        float eps, float weight_decay, float grad_scale, float max_norm,
                                        int has_copy, int has_sumsq) {
    float scale = grad_scale;
    if (has_sumsq) {
        const float norm = sqrtf(*grad_sumsq);
        if (!isfinite(norm)) return;  // a bad step: param, m, v, param_copy untouched
        if (max_norm > 0.0f) scale *= fminf(1.0f, max_norm / norm);
    }
    const float lr = *lr_ptr, t = *step_ptr;
    const float bc1 = 1.0f / (1.0f - powf(beta1, t)), bc2 = 1.0f / (1.0f - powf(beta2, t));
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float g = to_f32(grad[i]) * scale;
        const float mi = beta1 * to_f32(m[i]) + (1.0f - beta1) * g;
        const float vi = beta2 * to_f32(v[i]) + (1.0f - beta2) * g * g;
        float p = to_f32(param[i]);
        p -= lr * (mi * bc1 / (sqrtf(vi * bc2) + eps) + weight_decay * p);
        m[i] = from_f32<paramT>(mi);
        v[i] = from_f32<paramT>(vi);
        param[i] = from_f32<paramT>(p);
        if (has_copy) param_copy[i] = from_f32<copyT>(p);
    }
}
