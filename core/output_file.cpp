// Safe output files (see output_file.h).
#include "output_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "error.h"

namespace ember {

namespace {
namespace fs = std::filesystem;

const char* kind_of(const fs::file_status& s) {
  switch (s.type()) {
    case fs::file_type::directory:
      return "a directory";
    case fs::file_type::block:
    case fs::file_type::character:
      return "a device node";
    case fs::file_type::fifo:
      return "a FIFO";
    case fs::file_type::socket:
      return "a socket";
    default:
      return "not a regular file";
  }
}

fs::path folder_of(const fs::path& p) { return p.has_parent_path() ? p.parent_path() : fs::path("."); }

std::string temp_prefix(const fs::path& target) { return "." + target.filename().string() + ".tmp."; }

// ".NAME.tmp.PID" files of `target` whose process no longer runs: left by a killed save.
void remove_stale_temporaries(const fs::path& target) {
  const std::string prefix = temp_prefix(target);
  std::error_code ec;
  for (fs::directory_iterator it(folder_of(target), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string pid = name.substr(prefix.size());
    if (pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t p = static_cast<pid_t>(std::stol(pid));
    if (p == ::getpid() || (::kill(p, 0) != 0 && errno == ESRCH)) {
      std::error_code ignored;
      if (it->is_regular_file(ignored)) fs::remove(it->path(), ignored);
    }
  }
}
}  // namespace

std::string check_output_path(const std::string& path, const std::string& what) {
  const std::string where = what + " " + (path.empty() ? "''" : path) + ": ";
  if (path.empty()) throw IoError(where + "the path is empty");
  fs::path target(path);
  std::error_code ec;
  // Follow a chain of links to its final target (which may not exist yet): the links stay.
  for (int hops = 0; fs::is_symlink(fs::symlink_status(target, ec)); ++hops) {
    if (hops == 40) throw IoError(where + "too many levels of symbolic links");
    const fs::path next = fs::read_symlink(target, ec);
    if (ec) throw IoError(where + "cannot read the symbolic link " + target.string() + ": " + ec.message());
    target = next.is_absolute() ? next : folder_of(target) / next;
  }
  const fs::file_status st = fs::status(target, ec);
  if (fs::exists(st) && !fs::is_regular_file(st))
    throw IoError(where + (target.string() == path ? "" : target.string() + " ") + "is " + kind_of(st) +
                  "; only a regular file is ever replaced");
  if (target.filename().empty() || target.filename() == "." || target.filename() == "..")
    throw IoError(where + "names a directory, not a file");
  const fs::path dir = folder_of(target);
  const fs::file_status ds = fs::status(dir, ec);
  if (!fs::exists(ds)) throw IoError(where + "the folder " + dir.string() + " does not exist");
  if (!fs::is_directory(ds)) throw IoError(where + dir.string() + " is not a folder");
  // Creating a file is the only sure test (read-only mounts, /proc, permissions, ACLs).
  // A name of its own (not a temporary's, which a killed save with this PID may have left).
  const fs::path probe = dir / ("." + target.filename().string() + ".probe." + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(where + "cannot create a file in " + dir.string() + ": " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return target.string();
}

void write_all(int fd, const void* data, std::size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw IoError("writing " + path + " failed: " + std::strerror(errno));
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void write_file_atomically(const std::string& path, const std::string& what, const std::function<void(int fd)>& fill) {
  const fs::path target(check_output_path(path, what));
  remove_stale_temporaries(target);
  const fs::path dir = folder_of(target);
  const std::string tmp = (dir / (temp_prefix(target) + std::to_string(::getpid()))).string();
  // O_NOFOLLOW: a link planted under the temporary's name is not written through.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("cannot write " + what + " " + path + ": " + std::strerror(errno));
  try {
    fill(fd);
    if (::fsync(fd) != 0) throw IoError("fsync of " + tmp + " failed: " + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw IoError("closing " + tmp + " failed: " + why);
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw IoError("cannot move " + what + " into place at " + path + ": " + why);
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);  // the rename, durable
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace ember
