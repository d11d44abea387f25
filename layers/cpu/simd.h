// The CPU kernels' vector vocabulary, declared once. GCC/Clang vector types: 8 floats (one AVX2
// register; two SSE ones where a kernel is built for plain x86-64), 8 ints and bytes, 4 and 8
// doubles, 16 floats and doubles (AVX-512); the "u" twins are the same vectors at any element's
// address, so that loads and stores through them are single unaligned vector moves (a 32-byte
// __builtin_memcpy became two 16-byte moves through the stack, whose reload as one vector stalls
// on store forwarding). Local values only: never passed by value between functions (-Wpsabi).
// EMBER_AVX512 compiles a function for AVX-512 whatever the build's target; such a function runs
// only after cpu_avx512() (core/cpu/cpu_features.h) said yes.
#pragma once

#include <cstdint>

#if defined(__GNUC__)
namespace ember::cpu::simd {
typedef float f8 __attribute__((vector_size(32)));
typedef float f8u __attribute__((vector_size(32), aligned(4)));
typedef int32_t i8 __attribute__((vector_size(32)));
typedef uint8_t b8 __attribute__((vector_size(8)));
typedef double d4 __attribute__((vector_size(32)));
typedef double d4u __attribute__((vector_size(32), aligned(8)));
typedef double d8u __attribute__((vector_size(64), aligned(8)));
typedef float f16 __attribute__((vector_size(64)));
typedef float f16u __attribute__((vector_size(64), aligned(4)));
typedef double d16u __attribute__((vector_size(128), aligned(8)));
}  // namespace ember::cpu::simd
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define EMBER_AVX512 __attribute__((target("avx512f")))
#define EMBER_AVX512_INLINE __attribute__((target("avx512f"), always_inline)) inline
#endif
