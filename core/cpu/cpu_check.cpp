// check_cpu_support() and cpu_avx512() (cpu_features.h): compiled for baseline x86-64 (see cmake/EmberLibrary.cmake) so
// that it can run, and explain, on a CPU older than the one the kernels target.
#include <cstdlib>
#include <string>

#include "../error.h"
#include "../logger.h"
#include "../runtime.h"
#include "cpu_features.h"

namespace ember {

void check_cpu_support() {
#if defined(EMBER_CPU_ARCH) && (defined(__x86_64__) || defined(_M_X64))
  static const bool ok = [] {
    const std::string arch = EMBER_CPU_ARCH;
    if (arch == "x86-64-v3" || arch == "haswell")
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (arch == "x86-64-v4") return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    return true;  // "native" or others: built for this very machine, or the user's choice
  }();
  if (!ok)
    throw DeviceError(
        std::string("this CPU cannot run Ember's kernels: they were built for ") + EMBER_CPU_ARCH +
        "; rebuild with -DEMBER_CPU_ARCH=x86-64 (slower) or on this machine with -DEMBER_CPU_ARCH=native");
#endif
}

bool cpu_avx512() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool yes = [] {
    const char* cap = std::getenv("EMBER_MAX_CPU_ISA");
    std::string v;  // lower case, blanks dropped
    for (const char* c = cap ? cap : ""; *c; ++c)
      if (*c != ' ' && *c != '\t') v += static_cast<char>(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
    if (!v.empty() && v != "avx2")
      detail::logger().warn("EMBER_MAX_CPU_ISA='{}' is not a cap Ember knows (avx2): ignored", cap);
    __builtin_cpu_init();  // safe to call again; needed where this runs before the constructors
    return __builtin_cpu_supports("avx512f") && v != "avx2";
  }();
  return yes;
#else
  return false;
#endif
}

}  // namespace ember
