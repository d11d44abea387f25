// The CSV reader (see csv.h): one pass over the lines, each cell parsed whole with from_chars, so
// "1.5x", "", "nan" or "1e999" are errors naming where they are, not silent zeros.
#include "csv.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>

#include "../core/error.h"

namespace ember {

namespace {
std::vector<std::string> split(const std::string& line, char delimiter) {
  std::vector<std::string> cells;
  size_t start = 0;
  for (;;) {
    const size_t end = line.find(delimiter, start);
    cells.push_back(line.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return cells;
    start = end + 1;
  }
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}
}  // namespace

Dataset read_csv(const std::string& path, const CsvOptions& options) {
  std::ifstream in(path);
  EMBER_CHECK(in.good(), IoError, "read_csv: cannot open " + path);
  EMBER_CHECK(options.targets.empty() != options.target_indices.empty(), ArgumentError,
              "read_csv: name the target columns by header name or by index (one of the two)");
  EMBER_CHECK(options.header || options.targets.empty(), ArgumentError,
              "read_csv: target columns by name need a header row");
  const auto where = [&](int64_t row, size_t col) {
    return path + ", row " + std::to_string(row) + ", column " + std::to_string(col + 1);
  };
  std::string line;
  int64_t row = 0;
  std::vector<std::string> names;
  size_t columns = 0;
  std::vector<float> features, targets;
  std::vector<bool> is_target;
  size_t n_targets = 0;
  const auto set_columns = [&](size_t count) {
    columns = count;
    is_target.assign(columns, false);
    for (const std::string& t : options.targets) {
      const auto it = std::find(names.begin(), names.end(), t);
      EMBER_CHECK(it != names.end(), IoError, "read_csv: " + path + " has no column '" + t + "'");
      is_target[static_cast<size_t>(it - names.begin())] = true;
    }
    for (const int i : options.target_indices) {
      EMBER_CHECK(i >= 0 && static_cast<size_t>(i) < columns, IoError,
                  "read_csv: " + path + " has " + std::to_string(columns) + " columns, no index " + std::to_string(i));
      is_target[static_cast<size_t>(i)] = true;
    }
    n_targets = static_cast<size_t>(std::count(is_target.begin(), is_target.end(), true));
    EMBER_CHECK(n_targets < columns, IoError, "read_csv: " + path + ": every column is a target; no features left");
  };
  while (std::getline(in, line)) {
    ++row;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (trim(line).empty()) continue;  // blank lines (a trailing newline) carry nothing
    std::vector<std::string> cells = split(line, options.delimiter);
    if (options.header && names.empty()) {
      for (const std::string& c : cells) names.push_back(trim(c));
      set_columns(names.size());
      continue;
    }
    if (columns == 0) set_columns(cells.size());
    EMBER_CHECK(cells.size() == columns, IoError,
                "read_csv: " + path + ", row " + std::to_string(row) + " has " + std::to_string(cells.size()) +
                    " cells; the table has " + std::to_string(columns));
    for (size_t c = 0; c < columns; ++c) {
      const std::string cell = trim(cells[c]);
      float v = 0;
      const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), v);
      EMBER_CHECK(!cell.empty() && ec == std::errc() && end == cell.data() + cell.size() && std::isfinite(v), IoError,
                  "read_csv: " + where(row, c) + (names.empty() ? "" : " ('" + names[c] + "')") + ": '" + cell +
                      "' is not a finite number");
      (is_target[c] ? targets : features).push_back(v);
    }
  }
  EMBER_CHECK(in.eof(), IoError, "read_csv: reading " + path + " failed at row " + std::to_string(row));
  EMBER_CHECK(!features.empty(), IoError, "read_csv: " + path + " has no data rows");
  DatasetOptions o;
  o.name = options.name.empty() ? path : options.name;
  return Dataset::from_vectors(features, Shape{static_cast<int64_t>(columns - n_targets)}, targets,
                               Shape{static_cast<int64_t>(n_targets)}, std::move(o));
}

}  // namespace ember
