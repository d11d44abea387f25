// The library's log level: by name and by value, and what a level lets through to stderr.
#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

namespace ember {
namespace {

// What one message at `level` writes to stderr.
std::string logged(LogLevel level, const std::string& message) {
  testing::internal::CaptureStderr();
  log(level, message);
  return testing::internal::GetCapturedStderr();
}

TEST(Log, TheLevelByNameOrValueDecidesWhatReachesStderr) {
  set_log_level("warn");
  EXPECT_NE(logged(LogLevel::warn, "a warning").find("[ember] [warning] a warning"), std::string::npos);
  EXPECT_EQ(logged(LogLevel::info, "an info"), "");
  set_log_level(LogLevel::off);
  EXPECT_EQ(logged(LogLevel::error, "an error"), "");
  set_log_level(LogLevel::debug);
  EXPECT_NE(logged(LogLevel::debug, "a detail").find("a detail"), std::string::npos);
  EXPECT_THROW(set_log_level("loud"), ArgumentError);
  EXPECT_NE(logged(LogLevel::debug, "still debug").find("still debug"), std::string::npos);  // unchanged
  set_log_level(LogLevel::info);  // spdlog's default, as the other tests expect
}

}  // namespace
}  // namespace ember
