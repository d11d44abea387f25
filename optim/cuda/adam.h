// The fused Adam kernel: the same update as ember::cpu::adam_update (optim/adam.h), one pass
// over p, g, m, v on the device's stream.
#pragma once

#include <cstdint>

#include "../../core/cuda/context.h"

namespace ember::cuda {

// scalars (f64, on the device) = {t, lr_t}: t += 1, lr_t = lr sqrt(1 - beta2^t) / (1 - beta1^t),
// with lr read from the device (*lr, f32: what set_rate wrote).
void adam_advance(Context& ctx, double* scalars, const float* lr, double beta1, double beta2);
// *rate = value, queued on the stream (no host wait): the learning rate a captured step reads.
void set_rate(Context& ctx, float* rate, float value);
// The update with the step size scalars[1] read on the device.
void adam_update(Context& ctx, float* params, const float* grads, float* m, float* v, int64_t n, const double* scalars,
                 float beta1, float beta2, float epsilon);
// adam_advance then adam_update in one launch (fused_advance()): each block computes the step's
// {t, lr_t} from scalars[0] and *lr as adam_advance does (beta1, beta2 widened to double), updates
// its elements with that lr_t, and the last block to finish stores {t, lr_t} into scalars. The
// same bits as the two calls. With n == 0, adam_advance alone.
void adam_update_advance(Context& ctx, float* params, const float* grads, float* m, float* v, int64_t n,
                         double* scalars, const float* lr, float beta1, float beta2, float epsilon);

}  // namespace ember::cuda
