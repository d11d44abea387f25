/// @file
/// MNIST and Fashion-MNIST from a directory holding the four standard IDX files, raw or
/// gzipped: train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz],
/// t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz].
#pragma once

#include <string>

#include "dataset.h"

namespace ember {

/// The MNIST (or Fashion-MNIST) training and test sets, as image datasets (u8, scale 1/255).
struct MnistData {
  Dataset train;  ///< 60,000 images
  Dataset test;   ///< 10,000 images
};

/// Throws IoError naming the missing file and how to fetch it, or what is wrong with it.
/// `name` ("mnist" or "fashion-mnist") is used for dataset names and messages.
MnistData load_mnist(const std::string& dir, const std::string& name = "mnist");

/// The path of `base` or `base.gz` inside dir, whichever exists (raw preferred); throws IoError.
std::string find_idx_file(const std::string& dir, const std::string& base);

}  // namespace ember
