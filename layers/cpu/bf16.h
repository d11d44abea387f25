// bfloat16 on the CPU for the mixed_bf16 policy (core/runtime.h, Precision): fp32 -> bf16 rounding
// as oneDNN's reorders do it (to nearest, ties to even; a NaN stays a quiet NaN, infinities and
// zeros keep their sign), bf16 -> fp32 (exact), and the buffers a layer keeps between its forward
// and backward passes.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace ember::cpu {

using bf16 = uint16_t;  // the bits: fp32's upper half

inline bf16 to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;                                     // sign kept
  return static_cast<bf16>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);  // a select: vectorises
}

inline float from_bf16(bf16 h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// dst[i] = to_bf16(src[i]) for i < n (the OpenMP threads share a long one). With `mask`,
// dst[i] = mask[i] > 0 ? to_bf16(src[i]) : 0: a fused ReLU's backward (dy where y > 0).
void to_bf16(const float* src, bf16* dst, int64_t n, const float* mask = nullptr);

// What a bf16 layer keeps from its forward pass for its backward: its input in bf16 (the weight
// gradient's operand); and scratch reused every step: the output gradient's and the weights' bf16
// copies, and a bf16 output that never leaves a fused pair (conv2d_maxpool_bf16.h).
struct Bf16Buffers {
  std::vector<bf16> x, dy, w, y;
};

}  // namespace ember::cpu
