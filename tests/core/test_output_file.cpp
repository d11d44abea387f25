// Output files: a device node, FIFO or directory at the path is refused and left as it was; a
// symbolic link is followed, never replaced; a failed write leaves the old file and no
// temporary; temporaries of dead processes are removed. Every special file here is a private one
// in a temporary folder (never the system's /dev).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "idx_fixtures.h"
#include "test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& p) {
  std::ifstream f(p);
  return {std::istreambuf_iterator<char>(f), {}};
}

void write_text(const std::string& path, const std::string& text) {
  write_file_atomically(path, "test file", [&](int fd) { write_all(fd, text.data(), text.size(), path); });
}

class OutputFile : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::temp_dir("outfile"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string dir_;
};

TEST_F(OutputFile, RefusesSpecialFilesAndLeavesThemAsTheyWere) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0644), 0);
  fs::create_directory(path("dir"));
  // A private character device (the numbers of /dev/null); mknod needs root: skipped without.
  const bool have_node = ::mknod(path("node").c_str(), S_IFCHR | 0644, makedev(1, 3)) == 0;
  for (const std::string name : {"fifo", "dir", "node"}) {
    if (name == "node" && !have_node) continue;
    const fs::file_type before = fs::symlink_status(path(name)).type();
    EXPECT_THROW(check_output_path(path(name), "--save"), IoError) << name;
    EXPECT_THROW(write_text(path(name), "x"), IoError) << name;
    EXPECT_EQ(fs::symlink_status(path(name)).type(), before) << name << " was replaced";
  }
  try {
    check_output_path(path("fifo"), "--history");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("--history " + path("fifo") + ": is a FIFO"), std::string::npos) << e.what();
  }
}

TEST_F(OutputFile, RefusesAnEmptyPathAMissingFolderAndALinkLoop) {
  EXPECT_THROW(check_output_path("", "--save"), IoError);
  EXPECT_THROW(check_output_path(path("missing/f.json"), "--save"), IoError);
  fs::create_symlink("b", path("a"));
  fs::create_symlink("a", path("b"));
  EXPECT_THROW(write_text(path("a"), "x"), IoError);
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(path("a"))));
}

TEST_F(OutputFile, FollowsLinksToTheirTargetAndKeepsTheLinks) {
  fs::create_symlink("target.json", path("link.json"));  // dangling: the target is created
  fs::create_symlink(path("link.json"), path("link2.json"));
  EXPECT_EQ(check_output_path(path("link2.json")), path("target.json"));
  write_text(path("link2.json"), "one");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(path("link.json"))));
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(path("link2.json"))));
  EXPECT_EQ(slurp(path("target.json")), "one");
  write_text(path("link.json"), "two");  // the existing target replaced, the link kept
  EXPECT_EQ(slurp(path("target.json")), "two");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(path("link.json"))));
}

TEST_F(OutputFile, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  write_text(path("f"), "old");
  EXPECT_THROW(write_file_atomically(path("f"), "test file",
                                     [&](int fd) {
                                       write_all(fd, "new", 3, path("f"));
                                       throw IoError("disk full (simulated)");
                                     }),
               IoError);
  EXPECT_EQ(slurp(path("f")), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1) << "a temporary was left";
}

// A real save killed with SIGKILL half-way: the old file stays whole, the orphaned temporary
// (nothing can remove it at SIGKILL) is removed by the next save to that path.
TEST_F(OutputFile, ASaveKilledHalfWayLeavesTheOldFileAndItsTemporaryGoesNextTime) {
  write_text(path("f"), "old");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // writes 1 MiB at a time, slowly, for ever: killed while writing
    write_file_atomically(path("f"), "output file", [&](int fd) {
      const std::string chunk(1 << 20, 'x');
      for (;;) {
        write_all(fd, chunk.data(), chunk.size(), path("f"));
        usleep(10000);
      }
    });
    _exit(0);
  }
  const std::string tmp = path(".f.tmp." + std::to_string(child));
  for (int i = 0; i < 500 && !(fs::exists(tmp) && fs::file_size(tmp) > 0); ++i) usleep(10000);
  ASSERT_TRUE(fs::exists(tmp)) << "the child's temporary never appeared";
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(slurp(path("f")), "old");
  EXPECT_TRUE(fs::exists(tmp));  // orphaned: its process is dead
  write_text(path("f"), "new");
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_EQ(slurp(path("f")), "new");
}

TEST_F(OutputFile, TemporariesOfDeadProcessesAreRemovedByTheNextSave) {
  // PID 1 always runs; a PID above the kernel's maximum (4194304) never does.
  std::ofstream(path(".f.tmp.99999999")) << "orphan";
  std::ofstream(path(".f.tmp.1")) << "a live process's";
  std::ofstream(path(".g.tmp.99999999")) << "another target's";
  // A temporary with this process's own PID (a killed save whose PID came round again) neither
  // blocks the check nor the write.
  std::ofstream(path(".f.tmp." + std::to_string(::getpid()))) << "own PID";
  EXPECT_NO_THROW(check_output_path(path("f")));
  write_text(path("f"), "new");
  EXPECT_FALSE(fs::exists(path(".f.tmp.99999999")));
  EXPECT_TRUE(fs::exists(path(".f.tmp.1")));
  EXPECT_TRUE(fs::exists(path(".g.tmp.99999999")));
  EXPECT_EQ(slurp(path("f")), "new");
  EXPECT_FALSE(fs::exists(path(".f.tmp." + std::to_string(::getpid()))));
}

}  // namespace
}  // namespace ember
