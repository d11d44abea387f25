// read_csv: a numeric table to a Dataset, and the one clear error for each kind of bad file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "test_util.h"

namespace ember {
namespace {

// A private file for each test, removed after.
class Csv : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    path_ = (std::filesystem::temp_directory_path() /
             ("ember_csv_" + std::to_string(::getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".csv"))
                .string();
    std::ofstream(path_) << text;
    return path_;
  }
  void TearDown() override {
    if (!path_.empty()) std::filesystem::remove(path_);
  }
  // The IoError's message for reading `text` with `o`, or "" when it read.
  std::string error_of(const std::string& text, const CsvOptions& o) {
    try {
      read_csv(write(text), o);
    } catch (const IoError& e) {
      return e.what();
    }
    return "";
  }
  std::string path_;
};

TEST_F(Csv, ATableWithAHeaderSplitsIntoFeaturesAndNamedTargets) {
  const Dataset d = read_csv(write("x1, y ,x2\n1.5,10,-2\n\n3,20,4e-1\r\n"), {.targets = {"y"}});
  EXPECT_EQ(d.size(), 2);
  EXPECT_EQ(d.sample_shape(), Shape{2});
  EXPECT_EQ(d.target_shape(), Shape{1});
  EXPECT_EQ(d.features().to_vector(), (std::vector<float>{1.5f, -2.0f, 3.0f, 0.4f}));
  EXPECT_EQ(d.targets().to_vector(), (std::vector<float>{10.0f, 20.0f}));
  const Dataset e = read_csv(write("7,1,2\n8,3,4\n"), {.header = false, .target_indices = {0, 2}});
  EXPECT_EQ(e.features().to_vector(), (std::vector<float>{1.0f, 3.0f}));
  EXPECT_EQ(e.targets().to_vector(), (std::vector<float>{7.0f, 2.0f, 8.0f, 4.0f}));
}

TEST_F(Csv, EachBadFileGetsOneErrorNamingWhere) {
  const CsvOptions y{.targets = {"y"}};
  std::string m = error_of("a,y\n1,2\n3,x4\n", y);
  EXPECT_NE(m.find("row 3, column 2 ('y'): 'x4' is not a finite number"), std::string::npos) << m;
  m = error_of("a,y\n1,2\n3\n", y);
  EXPECT_NE(m.find("row 3 has 1 cells; the table has 2"), std::string::npos) << m;
  m = error_of("a,y\n1,\n", y);
  EXPECT_NE(m.find("row 2, column 2"), std::string::npos) << m;
  EXPECT_NE(error_of("a,y\n1,nan\n", y).find("'nan' is not a finite number"), std::string::npos);
  EXPECT_NE(error_of("a,b\n1,2\n", y).find("has no column 'y'"), std::string::npos);
  EXPECT_NE(error_of("a,y\n", y).find("no data rows"), std::string::npos);
  EXPECT_NE(error_of("1,2\n", {.header = false, .target_indices = {5}}).find("no index 5"), std::string::npos);
  EXPECT_THROW(read_csv(write("a,y\n1,2\n"), {}), ArgumentError);  // no target named
  EXPECT_THROW(read_csv("/nonexistent/ember.csv", y), IoError);
}

}  // namespace
}  // namespace ember
