/// @file
/// Seeded random numbers. SplitMix64 (Steele et al. 2014): tiny, fast, and the same bits on every
/// platform and compiler, which std::*_distribution does not promise. One --seed drives
/// initialisation, shuffling and sharding, each through its own derived stream (fork()).
#pragma once

#include <cmath>
#include <cstdint>

namespace ember {

/// A SplitMix64 generator: the same bits for the same seed on every platform and compiler.
class Rng {
 public:
  /// A generator whose sequence is determined by `seed`.
  explicit Rng(uint64_t seed = 0) : state_(seed) {}

  /// The next 64 random bits.
  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1) with 24 random bits (every value exactly representable as float).
  float uniform() { return static_cast<float>(next_u64() >> 40) * 0x1.0p-24f; }
  /// Uniform in [lo, hi): lo + (hi - lo) * uniform().
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  /// Uniform integer in [0, n), n > 0, unbiased: rejects the 2^64 mod n lowest draws.
  uint64_t below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;
    for (;;) {
      const uint64_t r = next_u64();
      if (r >= threshold) return r % n;
    }
  }
  /// Standard normal (Box-Muller).
  float normal() {
    const double u1 = (static_cast<double>(next_u64() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  /// An independent stream for a named purpose (e.g. fork(1) for init, fork(2) for shuffling).
  Rng fork(uint64_t stream) const {
    Rng r(state_ ^ (0xD1B54A32D192ED03ull * (stream + 1)));
    r.next_u64();
    return r;
  }

 private:
  uint64_t state_;
};

}  // namespace ember
