/// @file
/// Counter-based random bits shared by the CPU and GPU twins of Dropout: element i of step c
/// keeps or drops by a hash of (the layer's seed, c, i) alone, so both backends, every layout and
/// any thread count draw the same mask, and a step can be replayed (CUDA graphs) or resumed from
/// a checkpoint exactly. Private to the library.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define EMBER_HOST_DEVICE __host__ __device__
#else
#define EMBER_HOST_DEVICE
#endif

namespace ember::detail {

// SplitMix64's finaliser: a bijection of 64-bit words whose outputs pass BigCrush as a sequence.
EMBER_HOST_DEVICE inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The key of one step: the layer's seed and the step counter.
EMBER_HOST_DEVICE inline uint64_t step_key(uint64_t seed, uint64_t step) {
  return mix64(seed ^ mix64(step + 0x9E3779B97F4A7C15ull));
}

// 24 uniform bits for element `i` (its row-major NCHW index) under `key`.
EMBER_HOST_DEVICE inline uint32_t element_bits24(uint64_t key, uint64_t i) {
  return static_cast<uint32_t>(mix64(key + (i + 1) * 0x9E3779B97F4A7C15ull) >> 40);
}

// A step counter kept exactly in two f32 state values: [lo, hi], lo < 2^24, value hi * 2^24 + lo
// (exact up to 2^48 steps).
constexpr float kCounterBase = 16777216.0f;  // 2^24
EMBER_HOST_DEVICE inline uint64_t counter_value(const float* c) {
  return static_cast<uint64_t>(c[1]) * 16777216ull + static_cast<uint64_t>(c[0]);
}
EMBER_HOST_DEVICE inline void counter_advance(float* c) {
  c[0] += 1.0f;
  if (c[0] >= kCounterBase) {
    c[0] = 0.0f;
    c[1] += 1.0f;
  }
}

// Dropout's per-layer constants: keep element i when element_bits24(key, i) >= threshold, and
// scale what is kept by `scale` = 1 / (1 - rate) (inverted dropout).
struct DropoutParams {
  uint64_t seed = 0;
  uint32_t threshold = 0;  // ceil(rate * 2^24)
  float scale = 1.0f;
};

}  // namespace ember::detail
