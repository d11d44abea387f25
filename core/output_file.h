/// @file
/// Output files that never destroy what is at their path: checked before the work that produces
/// them, written atomically, and never put in place of anything but a regular file.
///
/// @code
///   ember::check_output_path(save_path, "--save");   // before training: fails now, not after it
///   ...
///   ember::write_file_atomically(save_path, "--save", [&](int fd) { ... write(fd, ...) ... });
/// @endcode
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace ember {

/// Checks that a file can be written at `path` and returns where it will land. A symbolic link
/// is followed to its final target, so the link stays a link and its target is replaced. The
/// target must be absent or a regular file (a directory, device node, FIFO or socket is
/// refused: it is never replaced by a file); its folder must exist, and a file must be creatable
/// in it (tried: a probe file is created and removed). Throws IoError "<what> <path>: <why>".
std::string check_output_path(const std::string& path, const std::string& what = "output file");

/// Writes `path` atomically. `fill` writes the contents into the open descriptor of a temporary
/// file beside the target (".NAME.tmp.PID"), which is then fsync'ed and renamed over the target
/// (check_output_path's: through a link, onto the link's target); the folder is fsync'ed too. On
/// any failure the temporary file is removed and the old file is left as it was. Temporary files
/// of the same target left by processes that no longer run (a killed save) are removed first.
void write_file_atomically(const std::string& path, const std::string& what, const std::function<void(int fd)>& fill);

/// Writes all `n` bytes of `data` to `fd` (retrying short writes and EINTR), or throws IoError
/// naming `path`.
void write_all(int fd, const void* data, std::size_t n, const std::string& path);

}  // namespace ember
