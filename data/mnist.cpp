// MNIST loading.
#include "mnist.h"

#include <filesystem>

#include "../core/error.h"
#include "idx.h"

namespace ember {

std::string find_idx_file(const std::string& dir, const std::string& base) {
  namespace fs = std::filesystem;
  for (const std::string& candidate : {base, base + ".gz"}) {
    const fs::path p = fs::path(dir) / candidate;
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);
    if (fs::is_regular_file(st)) return p.string();
    if (fs::exists(st))  // not "missing": say what is in its place
      throw IoError(p.string() +
                    (fs::is_directory(st) ? " is a directory" : " is not a regular file (a FIFO, socket or device)") +
                    ", not an IDX file");
  }
  throw IoError("missing data file " + (fs::path(dir) / base).string() +
                "[.gz]; fetch the data with scripts/fetch_data.sh (or pass --data-dir)");
}

MnistData load_mnist(const std::string& dir, const std::string& name) {
  auto load = [&](const char* images, const char* labels, const std::string& split) {
    const std::string images_path = find_idx_file(dir, images);
    Tensor x = load_idx_images(images_path);
    Tensor y = load_idx_labels(find_idx_file(dir, labels), 10);
    if (x.dim(0) == 0) throw IoError(images_path + ": the " + split + " set holds no images");
    if (x.dim(0) != y.dim(0))
      throw IoError(dir + ": " + split + " has " + std::to_string(x.dim(0)) + " images but " +
                    std::to_string(y.dim(0)) + " labels");
    return Dataset(std::move(x), std::move(y), 10, name + "/" + split);
  };
  return {load("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "train"),
          load("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", "test")};
}

}  // namespace ember
