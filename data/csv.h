/// @file
/// CSV of numbers as a Dataset: a table whose every cell is a number (an optional header row names
/// the columns), some columns the targets, the rest the features, both f32.
///
/// @code
///   Dataset d = read_csv("houses.csv", {.targets = {"price"}});   // by header name
///   Dataset d = read_csv("data.csv", {.header = false, .target_indices = {0}});
/// @endcode
///
/// Errors are IoError naming the file, the row (1-based, as an editor shows it, the header
/// counted) and the column: a cell that is not a number, a row with another number of cells than
/// the first, an unknown target name, a file with no data rows.
#pragma once

#include <string>
#include <vector>

#include "dataset.h"

namespace ember {

/// How read_csv() reads a file: its header, delimiter and target columns.
struct CsvOptions {
  bool header = true;                  ///< the first row names the columns
  char delimiter = ',';                ///< the cell separator
  std::vector<std::string> targets{};  ///< target columns by header name
  std::vector<int> target_indices{};   ///< or by 0-based index (either, not both; one at least)
  std::string name{};                  ///< the dataset's name (default: the file's)
};

/// Reads the CSV file at `path` into a Dataset of f32 features and f32 targets (see
/// csv.h for the errors).
Dataset read_csv(const std::string& path, const CsvOptions& options);

}  // namespace ember
