// What Ember's own CPU kernels may use (oneDNN decides for itself at run time).
#pragma once

namespace ember {

// Whether Ember's own kernels take their AVX-512 paths: the CPU has AVX-512F and the environment
// variable EMBER_MAX_CPU_ISA does not cap them (another value than avx2 is ignored, with a
// warning). EMBER_MAX_CPU_ISA=avx2 (any case) gives the
// paths a CPU without AVX-512 runs, on a machine that has it: with ONEDNN_MAX_CPU_ISA=AVX2 for
// oneDNN's kernels, a run as on an AVX2 machine, for tests and comparisons (in a build for the
// default EMBER_CPU_ARCH, x86-64-v3: with native or x86-64-v4 the compiler may use AVX-512
// anywhere). Case and blanks are ignored; other values change nothing. Read once per process.
bool cpu_avx512();

}  // namespace ember
