// The apps' output paths against the files a run reads and against each other: an output that
// names an input would destroy it (a history over the checkpoint it resumed from, a model over
// the training text), two outputs on one path would leave only the last. Checked before any work.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "ember.h"

namespace ember::apps {

// Whether a and b name one file: the same file where both exist (links and hard links
// included), else the same path once the links of its existing part are resolved.
inline bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ec_a, ec_b;
  if (fs::exists(a, ec_a) && fs::exists(b, ec_b)) {
    std::error_code ec;
    return fs::equivalent(a, b, ec) && !ec;
  }
  const fs::path ca = fs::weakly_canonical(a, ec_a), cb = fs::weakly_canonical(b, ec_b);
  return !ec_a && !ec_b && ca == cb;
}

// A path and what gave it ("--save", "the data set").
struct NamedPath {
  std::string what, path;
};

// IoError when `output` (a path the run writes; empty: none) names the same file as one of
// `others` (empty paths skipped).
inline void check_not_same(const NamedPath& output, const std::vector<NamedPath>& others) {
  if (output.path.empty()) return;
  for (const NamedPath& other : others)
    if (!other.path.empty() && same_file(output.path, other.path))
      throw IoError(output.what + " " + output.path + " is the file of " + other.what +
                    (other.path == output.path ? "" : " (" + other.path + ")") +
                    ": writing it would replace that file; choose another path");
}

// --csv of the benchmarks: `header` and `rows`, a line each, written atomically to `path` (checked
// with check_output_path before the benchmark runs).
inline void write_csv(const std::string& path, const std::string& header, const std::vector<std::string>& rows) {
  std::string text = header + "\n";
  for (const std::string& row : rows) text += row + "\n";
  write_file_atomically(path, "--csv", [&](int fd) { write_all(fd, text.data(), text.size(), path); });
}

}  // namespace ember::apps
