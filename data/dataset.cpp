// Dataset: validation, views, splits, and the batch gather (data/cpu/gather.h).
#include "dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "../core/error.h"
#include "../core/rng.h"
#include "cpu/gather.h"

namespace ember {

namespace {
void check_labels(const Tensor& labels, int num_classes) {
  if (labels.dtype() != DType::I32 || num_classes <= 0) return;
  const int32_t* y = labels.data<int32_t>();
  for (int64_t i = 0; i < labels.numel(); ++i)
    EMBER_CHECK(y[i] >= 0 && y[i] < num_classes, ArgumentError,
                "Dataset: label " + std::to_string(y[i]) + " at index " + std::to_string(i) + " is outside [0, " +
                    std::to_string(num_classes) + ")");
}

// `values` (row-major, count * per) as a CPU tensor of `shape`.
template <typename T>
Tensor tensor_of(std::span<const T> values, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, Device::cpu());
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size_bytes());
  return t;
}

int64_t samples_in(size_t values, const Shape& sample, const char* what) {
  const int64_t per = sample.numel();
  EMBER_CHECK(per > 0 && static_cast<int64_t>(values) % per == 0, ShapeError,
              std::string("Dataset::from_vectors: ") + what + " hold " + std::to_string(values) +
                  " values, not a whole number of samples of " + sample.str());
  return static_cast<int64_t>(values) / per;
}
}  // namespace

Dataset::Dataset(Tensor images, Tensor labels, int num_classes, std::string name) {
  EMBER_CHECK(images.dtype() == DType::U8 && images.rank() == 4, ShapeError,
              "Dataset: images must be u8 (N, C, H, W), got " + images.str());
  EMBER_CHECK(labels.dtype() == DType::I32 && labels.rank() == 1, ShapeError,
              "Dataset: labels must be i32 (N), got " + labels.str());
  EMBER_CHECK(num_classes > 0, ArgumentError, "Dataset: num_classes must be > 0");
  *this = from_tensors(std::move(images), std::move(labels),
                       {.scale = 1.0f / 255.0f, .num_classes = num_classes, .name = std::move(name)});
}

Dataset Dataset::from_tensors(Tensor features, Tensor targets, DatasetOptions options) {
  const float scale = options.scale;
  options.scale = 1.0f;
  return from_inputs({DataInput{.name = "", .values = std::move(features), .scale = scale}}, std::move(targets),
                     std::move(options));
}

Dataset Dataset::from_inputs(std::vector<DataInput> inputs, Tensor targets, DatasetOptions options) {
  return from_inputs(std::move(inputs), {DataTarget{.name = "", .values = std::move(targets)}}, std::move(options));
}

namespace {
// All of `items` named or none, the names unique; `what` is "input" or "target".
template <typename T>
void check_names(const std::vector<T>& items, const char* what) {
  const bool named = !items[0].name.empty();
  for (size_t k = 0; k < items.size(); ++k) {
    EMBER_CHECK(items[k].name.empty() != named, ArgumentError,
                std::string("Dataset: name every ") + what + " or none (" + what + " 0 is " +
                    (named ? "'" + items[0].name + "'" : "unnamed") + ", " + what + " " + std::to_string(k) +
                    (named ? " unnamed)" : " '" + items[k].name + "')"));
    for (size_t j = 0; j < k; ++j)
      EMBER_CHECK(!named || items[j].name != items[k].name, ArgumentError,
                  std::string("Dataset: two ") + what + "s are named '" + items[k].name + "'");
  }
}

// "features" / "targets" for a dataset of one, "input 1 'meta'" for one of several.
template <typename T>
std::string which(const std::vector<T>& items, size_t k, const char* one, const char* what) {
  if (items.size() == 1) return one;
  return std::string(what) + " " + std::to_string(k) + (items[k].name.empty() ? "" : " '" + items[k].name + "'");
}
}  // namespace

Dataset Dataset::from_inputs(std::vector<DataInput> inputs, std::vector<DataTarget> targets, DatasetOptions options) {
  EMBER_CHECK(!inputs.empty(), ArgumentError, "Dataset: no inputs");
  EMBER_CHECK(!targets.empty(), ArgumentError, "Dataset: no targets");
  EMBER_CHECK(
      options.scale == 1.0f, ArgumentError,
      "Dataset::from_inputs: each input has its own scale (DataInput::scale); leave DatasetOptions::scale at 1");
  EMBER_CHECK(options.num_classes >= 0, ArgumentError, "Dataset: num_classes must be >= 0");
  check_names(inputs, "input");
  check_names(targets, "target");
  for (size_t k = 0; k < targets.size(); ++k) {
    Tensor& t = targets[k].values;
    const std::string w = which(targets, k, "targets", "target");
    EMBER_CHECK(t.defined() && (t.dtype() == DType::I32 || t.dtype() == DType::F32) && t.rank() >= 1 &&
                    t.device().is_cpu() && t.layout() == Layout::RowMajor,
                ShapeError,
                "Dataset: " + w + " must be i32 (N, ...) labels or f32 (N, ...) on the cpu, got " +
                    (t.defined() ? t.str() : std::string("nothing")));
    EMBER_CHECK(t.dim(0) == targets[0].values.dim(0), ShapeError,
                "Dataset: " + std::to_string(t.dim(0)) + " samples of " + w + " but " +
                    std::to_string(targets[0].values.dim(0)) + " of target 0");
    check_labels(t, options.num_classes);
    // One f32 value per sample: (N, 1), what a model's (1,) output is compared with.
    if (t.dtype() == DType::F32 && t.rank() == 1) t = t.reshape(Shape{t.dim(0), 1});
  }
  const int64_t n = targets[0].values.dim(0);
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& f = inputs[k].values;
    const std::string w = which(inputs, k, "features", "input");
    EMBER_CHECK(f.defined() && (f.dtype() == DType::U8 || f.dtype() == DType::F32 || f.dtype() == DType::I32) &&
                    f.rank() >= 2 && f.device().is_cpu() && f.layout() == Layout::RowMajor,
                ShapeError,
                "Dataset: " + w + " must be u8, f32 or i32 (N, ...) row-major on the cpu, got " +
                    (f.defined() ? f.str() : std::string("nothing")));
    EMBER_CHECK(std::isfinite(inputs[k].scale) && inputs[k].scale != 0.0f, ArgumentError,
                "Dataset: the scale of " + w + " must be finite and non-zero, got " + std::to_string(inputs[k].scale));
    // Ids are not quantities: a batch carries them as they are.
    EMBER_CHECK(f.dtype() != DType::I32 || inputs[k].scale == 1.0f, ArgumentError,
                "Dataset: " + w + " are i32 ids, passed to the batch as they are: the scale must be 1, got " +
                    std::to_string(inputs[k].scale));
    EMBER_CHECK(
        f.dim(0) == n, ShapeError,
        "Dataset: " + std::to_string(f.dim(0)) + " samples of " + w + " but " + std::to_string(n) + " of targets");
  }
  Dataset d;
  d.inputs_ = std::move(inputs);
  d.targets_ = std::move(targets);
  d.num_classes_ = options.num_classes;
  d.name_ = std::move(options.name);
  return d;
}

const DataInput& Dataset::input(size_t k) const {
  EMBER_CHECK(
      k < inputs_.size(), ArgumentError,
      "Dataset::input(" + std::to_string(k) + ") of a dataset of " + std::to_string(inputs_.size()) + " inputs");
  return inputs_[k];
}

const DataTarget& Dataset::target(size_t k) const {
  EMBER_CHECK(
      k < targets_.size(), ArgumentError,
      "Dataset::target(" + std::to_string(k) + ") of a dataset of " + std::to_string(targets_.size()) + " targets");
  return targets_[k];
}

namespace {
// `items` in the order of `names`: by name when named, else by position (the counts must match).
template <typename T>
std::vector<T> in_order(const std::vector<T>& items, const std::vector<std::string>& names, const char* what,
                        const char* kind) {
  const auto listed = [](const auto& list, const auto& name_of) {
    std::string out = "[";
    for (size_t i = 0; i < list.size(); ++i) out += (i ? ", '" : "'") + name_of(list[i]) + "'";
    return out + "]";
  };
  const auto model_names = [&] { return listed(names, [](const std::string& n) { return n; }); };
  const auto data_names = [&] { return listed(items, [](const T& it) { return it.name; }); };
  if (items.empty() || items[0].name.empty()) {  // by position
    EMBER_CHECK(items.size() == names.size(), ShapeError,
                std::string(what) + ": the data has " + std::to_string(items.size()) + " " + kind +
                    (items.size() == 1 ? "" : "s") + " but the model " + std::to_string(names.size()) + " " +
                    model_names());
    return items;
  }
  std::vector<T> out;
  for (const std::string& n : names) {
    const auto it = std::find_if(items.begin(), items.end(), [&](const T& x) { return x.name == n; });
    EMBER_CHECK(it != items.end(), ShapeError,
                std::string(what) + ": the model's " + kind + " '" + n + "' is not in the data (its " + kind +
                    "s are " + data_names() + ")");
    out.push_back(*it);
  }
  EMBER_CHECK(items.size() == names.size(), ShapeError,
              std::string(what) + ": the data's " + kind + "s " + data_names() + " are more than the model's " +
                  model_names() + " (one the model does not use is refused, not ignored)");
  return out;
}
}  // namespace

Dataset Dataset::arranged_for(const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
                              const char* what) const {
  Dataset d = *this;
  d.inputs_ = in_order(inputs_, inputs, what, "input");
  d.targets_ = in_order(targets_, outputs, what, "target");
  return d;
}

Dataset Dataset::from_vectors(std::span<const float> features, const Shape& sample, std::span<const float> targets,
                              const Shape& target, DatasetOptions options) {
  const int64_t n = samples_in(features.size(), sample, "the features");
  const int64_t m = samples_in(targets.size(), target, "the targets");
  EMBER_CHECK(
      n == m, ShapeError,
      "Dataset::from_vectors: " + std::to_string(n) + " samples of features but " + std::to_string(m) + " of targets");
  const Shape ts = target.rank() == 0 ? Shape{m, 1} : target.with_batch(m);  // one value: (N, 1)
  return from_tensors(tensor_of(features, sample.with_batch(n), DType::F32), tensor_of(targets, ts, DType::F32),
                      std::move(options));
}

Dataset Dataset::from_vectors(std::span<const float> features, const Shape& sample, std::span<const int32_t> labels,
                              DatasetOptions options) {
  const int64_t n = samples_in(features.size(), sample, "the features");
  EMBER_CHECK(n == static_cast<int64_t>(labels.size()), ShapeError,
              "Dataset::from_vectors: " + std::to_string(n) + " samples of features but " +
                  std::to_string(labels.size()) + " labels");
  return from_tensors(tensor_of(features, sample.with_batch(n), DType::F32), tensor_of(labels, Shape{n}, DType::I32),
                      std::move(options));
}

Dataset Dataset::take(int64_t n) const {
  EMBER_CHECK(n >= 0 && n <= size(), ArgumentError,
              "Dataset::take(" + std::to_string(n) + ") of a dataset of " + std::to_string(size()));
  return slice(0, n);
}

Dataset Dataset::slice(int64_t begin, int64_t end) const {
  EMBER_CHECK(0 <= begin && begin <= end && end <= size(), ArgumentError,
              "Dataset::slice(" + std::to_string(begin) + ", " + std::to_string(end) + ") of a dataset of " +
                  std::to_string(size()));
  Dataset d = *this;
  for (DataInput& in : d.inputs_) in.values = in.values.rows(begin, end - begin);
  for (DataTarget& t : d.targets_) t.values = t.values.rows(begin, end - begin);
  return d;
}

std::pair<Dataset, Dataset> Dataset::split(double fraction, uint64_t seed) const {
  EMBER_CHECK(fraction > 0.0 && fraction < 1.0, ArgumentError,
              "Dataset::split: the fraction must be in (0, 1), got " + std::to_string(fraction));
  // As validation_split (Keras): floor(n (1 - fraction)) samples in the first part.
  const int64_t held = size() - static_cast<int64_t>(std::floor(static_cast<double>(size()) * (1.0 - fraction)));
  EMBER_CHECK(held > 0 && held < size(), ArgumentError,
              "Dataset::split(" + std::to_string(fraction) + ") of " + std::to_string(size()) +
                  " samples: both parts must be non-empty");
  std::vector<int64_t> order(static_cast<size_t>(size()));
  std::iota(order.begin(), order.end(), int64_t{0});
  Rng rng = Rng(seed).fork(0x53504c4954ull /* "SPLIT" */);
  for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
  // Copies of the rows in that order: the first size - held, then the rest.
  const auto rows = [&](const Tensor& from, int64_t begin, int64_t end) {
    Tensor t = Tensor::empty(from.shape().without_batch().with_batch(end - begin), from.dtype(), Device::cpu());
    const size_t per = from.nbytes() / static_cast<size_t>(size());
    for (int64_t i = begin; i < end; ++i)
      std::memcpy(static_cast<char*>(t.raw()) + static_cast<size_t>(i - begin) * per,
                  static_cast<const char*>(from.raw()) + static_cast<size_t>(order[static_cast<size_t>(i)]) * per, per);
    return t;
  };
  const auto part = [&](int64_t begin, int64_t end) {
    Dataset d = *this;
    for (DataInput& in : d.inputs_) in.values = rows(in.values, begin, end);
    for (DataTarget& t : d.targets_) t.values = rows(t.values, begin, end);
    return d;
  };
  return {part(0, size() - held), part(size() - held, size())};
}

void Dataset::gather(std::span<const int64_t> indices, Tensor& x, Tensor& y) const {
  EMBER_CHECK(inputs_.size() == 1 && targets_.size() == 1, ArgumentError,
              "Dataset::gather: the dataset has " + std::to_string(inputs_.size()) + " inputs and " +
                  std::to_string(targets_.size()) + " targets: gather into lists");
  const int64_t b = static_cast<int64_t>(indices.size());
  ensure(x, sample_shape().with_batch(b), inputs_[0].batch_dtype(), Device::cpu());
  ensure(y, target_shape().with_batch(b), target_dtype(), Device::cpu());
  cpu::gather_batch(features(), targets(), scale(), indices, x, y);
}

void Dataset::gather(std::span<const int64_t> indices, std::vector<Tensor>& xs, std::vector<Tensor>& ys) const {
  const int64_t b = static_cast<int64_t>(indices.size());
  xs.resize(inputs_.size());
  ys.resize(targets_.size());
  for (size_t k = 0; k < targets_.size(); ++k)
    ensure(ys[k], targets_[k].values.shape().without_batch().with_batch(b), targets_[k].values.dtype(), Device::cpu());
  for (size_t k = 0; k < inputs_.size(); ++k) {
    ensure(xs[k], inputs_[k].values.shape().without_batch().with_batch(b), inputs_[k].batch_dtype(), Device::cpu());
    static const Tensor none;  // target 0 once, with input 0 (which checks the indices)
    cpu::gather_batch(inputs_[k].values, k == 0 ? targets() : none, inputs_[k].scale, indices, xs[k], ys[0]);
  }
  for (size_t k = 1; k < targets_.size(); ++k) {  // the further targets' rows, as they are
    const Tensor& t = targets_[k].values;
    const size_t per = t.nbytes() / static_cast<size_t>(std::max<int64_t>(size(), 1));
    for (int64_t i = 0; i < b; ++i)
      std::memcpy(static_cast<char*>(ys[k].raw()) + static_cast<size_t>(i) * per,
                  static_cast<const char*>(t.raw()) + static_cast<size_t>(indices[static_cast<size_t>(i)]) * per, per);
  }
}

}  // namespace ember
