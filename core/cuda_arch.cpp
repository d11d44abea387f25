// See cuda_arch.h.
#include "cuda_arch.h"

namespace ember::detail {

ArchCoverage arch_coverage(std::string_view archs, int major, int minor) {
  const int device = major * 10 + minor;
  bool unknown = false;
  while (!archs.empty()) {
    const size_t end = archs.find_first_of(";, ");
    std::string_view entry = archs.substr(0, end);
    archs = end == std::string_view::npos ? std::string_view() : archs.substr(end + 1);
    if (entry.empty()) continue;
    bool sass = true, ptx = true;
    if (entry.ends_with("-real")) {
      ptx = false;
      entry.remove_suffix(5);
    } else if (entry.ends_with("-virtual")) {
      sass = false;
      entry.remove_suffix(8);
    }
    char variant = 0;  // 'a': arch-specific, 'f': family-specific
    if (!entry.empty() && (entry.back() == 'a' || entry.back() == 'f')) {
      variant = entry.back();
      entry.remove_suffix(1);
    }
    bool digits = entry.size() >= 2 && entry.size() <= 4;
    for (const char c : entry) digits = digits && c >= '0' && c <= '9';
    int code = 0;
    if (digits)
      for (const char c : entry) code = code * 10 + (c - '0');  // at most 4 digits: no overflow
    if (!digits) {
      unknown = true;  // "all", "all-major", "native", or something this parser does not know
      continue;
    }
    const int arch_major = code / 10, arch_minor = code % 10;
    if (variant == 'a') {
      if (code == device) return ArchCoverage::Yes;
      continue;
    }
    const bool same_family = arch_major == major && arch_minor <= minor;
    if (variant == 'f' || sass) {
      if (same_family) return ArchCoverage::Yes;
    }
    if (variant == 0 && ptx && code <= device) return ArchCoverage::Yes;
  }
  return unknown ? ArchCoverage::Unknown : ArchCoverage::No;
}

}  // namespace ember::detail
