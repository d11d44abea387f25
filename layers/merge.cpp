// Merge layers: shapes, and forward/backward through the elementwise ops (layers/ops/elementwise.h).
#include "merge.h"

#include "../core/error.h"
#include "layer_config.h"
#include "ops/elementwise.h"

namespace ember {

Shape Merge::build(const Shape& /*sample_shape*/) {
  throw ArgumentError(type() + " merges two or more inputs: call it on a list of tensors (layers/merge.h)");
}

void Merge::do_release_buffers() {
  Layer::do_release_buffers();
  dxs_.clear();
}

const Tensor& Merge::do_forward(const Tensor& /*x*/, bool /*training*/) {
  throw ArgumentError(type() + " merges two or more inputs: forward_inputs(), not forward()");
}

const Tensor& Merge::do_backward(const Tensor& /*dy*/) {
  throw Error(type() + " merges two or more inputs: backward_inputs(), not backward()");
}

void Merge::check_inputs(const std::vector<Shape>& shapes, size_t count) const {
  EMBER_CHECK(shapes.size() >= 2 && (count == 0 || shapes.size() == count), ArgumentError,
              type() + " takes " + (count == 0 ? std::string("two or more") : std::to_string(count)) +
                  " inputs, given " + std::to_string(shapes.size()));
  for (size_t i = 1; i < shapes.size(); ++i)
    EMBER_CHECK(shapes[i].rank() == shapes[0].rank(), ShapeError,
                type() + ": input " + std::to_string(i) + " is " + shapes[i].str() + " but input 0 is " +
                    shapes[0].str() + " (inputs of one rank)");
}

// --- Add, Subtract, Multiply, Average, Maximum -----------------------------------------------------

std::string ElementwiseMerge::type() const {
  switch (kind_) {
    case Kind::Add:
      return "Add";
    case Kind::Subtract:
      return "Subtract";
    case Kind::Multiply:
      return "Multiply";
    case Kind::Average:
      return "Average";
    case Kind::Maximum:
      return "Maximum";
  }
  return "?";
}

Shape ElementwiseMerge::build_inputs(const std::vector<Shape>& sample_shapes) {
  check_inputs(sample_shapes, kind_ == Kind::Subtract ? 2 : 0);
  for (size_t i = 1; i < sample_shapes.size(); ++i)
    EMBER_CHECK(sample_shapes[i] == sample_shapes[0], ShapeError,
                type() + ": input " + std::to_string(i) + " is " + sample_shapes[i].str() + " but input 0 is " +
                    sample_shapes[0].str() + " (no broadcasting: inputs of one shape)");
  return sample_shapes[0];
}

void ElementwiseMerge::do_release_buffers() {
  Merge::do_release_buffers();
  xs_.clear();
  converted_.clear();
  grads_scratch_.clear();
  y_ = dy_copy_ = claimed_ = Tensor();
}

const Tensor& ElementwiseMerge::do_forward_inputs(const std::vector<const Tensor*>& xs, bool /*training*/) {
  EMBER_CHECK(xs.size() >= 2 && (kind_ != Kind::Subtract || xs.size() == 2), ArgumentError,
              type() + ": forward_inputs got " + std::to_string(xs.size()) + " inputs");
  const Tensor& first = *xs[0];
  xs_.resize(xs.size());
  converted_.resize(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    EMBER_CHECK(xs[i]->shape() == first.shape() && xs[i]->device() == first.device(), ShapeError,
                type() + ": input " + std::to_string(i) + " is " + xs[i]->str() + " but input 0 is " + first.str());
    xs_[i] = as_layout(*xs[i], first.layout(), converted_[i]);  // shallow: a handle
  }
  ensure(y_, first.shape(), DType::F32, first.device(), first.layout());
  using detail::BinaryOp;
  const BinaryOp op = kind_ == Kind::Subtract   ? BinaryOp::Subtract
                      : kind_ == Kind::Multiply ? BinaryOp::Multiply
                      : kind_ == Kind::Maximum  ? BinaryOp::Maximum
                                                : BinaryOp::Add;
  // Left to right, ((x0 op x1) op x2) ...: Keras' order.
  detail::elementwise_binary(op, xs_[0], xs_[1], y_);
  for (size_t i = 2; i < xs_.size(); ++i) detail::elementwise_binary(op, y_, xs_[i], y_);
  if (kind_ == Kind::Average) detail::elementwise_scale(1.0f / static_cast<float>(xs_.size()), y_, y_);
  return y_;
}

const std::vector<Tensor>& ElementwiseMerge::do_backward_inputs(const Tensor& dy) {
  const size_t n = xs_.size();
  dxs_.resize(n);
  if (kind_ == Kind::Add) {  // every input's gradient is dy itself
    for (auto& d : dxs_) d = dy;
    return dxs_;
  }
  const Tensor& g = as_layout(dy, y_.layout(), dy_copy_);
  grads_scratch_.resize(n);
  const auto scratch = [&](size_t i) -> Tensor& {
    ensure(grads_scratch_[i], y_.shape(), DType::F32, y_.device(), y_.layout());
    return grads_scratch_[i];
  };
  switch (kind_) {
    case Kind::Add:
      break;
    case Kind::Subtract:
      dxs_[0] = dy;
      detail::elementwise_scale(-1.0f, g, scratch(1));
      dxs_[1] = grads_scratch_[1];
      break;
    case Kind::Average:  // one tensor, shared by every input
      detail::elementwise_scale(1.0f / static_cast<float>(n), g, scratch(0));
      for (auto& d : dxs_) d = grads_scratch_[0];
      break;
    case Kind::Multiply:  // dy times the other inputs, in input order
      for (size_t i = 0; i < n; ++i) {
        Tensor& d = scratch(i);
        bool first = true;
        for (size_t j = 0; j < n; ++j) {
          if (j == i) continue;
          detail::elementwise_binary(detail::BinaryOp::Multiply, first ? g : d, xs_[j], d);
          first = false;
        }
        dxs_[i] = d;
      }
      break;
    case Kind::Maximum:
      ensure(claimed_, y_.shape(), DType::F32, y_.device(), y_.layout());
      claimed_.zero();
      for (size_t i = 0; i < n; ++i) {
        detail::elementwise_maximum_grad(xs_[i], y_, g, claimed_, scratch(i));
        dxs_[i] = grads_scratch_[i];
      }
      break;
  }
  return dxs_;
}

// --- Concatenate ----------------------------------------------------------------------------------

Shape Concatenate::build_inputs(const std::vector<Shape>& sample_shapes) {
  check_inputs(sample_shapes, 0);
  const int rank = sample_shapes[0].rank() + 1;  // with the batch axis
  const int axis = axis_ < 0 ? axis_ + rank : axis_;
  EMBER_CHECK(axis >= 1 && axis < rank, ArgumentError,
              "Concatenate: axis " + std::to_string(axis_) + " of inputs (N, ...) of rank " + std::to_string(rank) +
                  (axis == 0 ? " is the batch axis" : " is out of range"));
  sample_axis_ = axis - 1;
  Shape out = sample_shapes[0];
  int64_t total = 0;
  for (size_t i = 0; i < sample_shapes.size(); ++i) {
    for (int d = 0; d < out.rank(); ++d)
      EMBER_CHECK(d == sample_axis_ || sample_shapes[i][d] == out[d], ShapeError,
                  "Concatenate: input " + std::to_string(i) + " is " + sample_shapes[i].str() + " but input 0 is " +
                      out.str() + " (all axes but axis " + std::to_string(axis_) + " must match)");
    total += sample_shapes[i][sample_axis_];
  }
  out[sample_axis_] = total;
  out_ = out;
  in_shapes_ = sample_shapes;
  widths_.clear();
  for (const Shape& s : sample_shapes) {
    int64_t w = 1;
    for (int d = sample_axis_; d < s.rank(); ++d) w *= s[d];
    widths_.push_back(w);
  }
  return out;
}

void Concatenate::do_release_buffers() {
  Merge::do_release_buffers();
  rowmajor_.clear();
  y_ = dy_copy_ = Tensor();
}

const Tensor& Concatenate::do_forward_inputs(const std::vector<const Tensor*>& xs, bool /*training*/) {
  EMBER_CHECK(xs.size() == in_shapes_.size(), ArgumentError,
              "Concatenate: forward_inputs got " + std::to_string(xs.size()) + " inputs, built for " +
                  std::to_string(in_shapes_.size()));
  const int64_t n = xs[0]->dim(0);
  for (size_t i = 0; i < xs.size(); ++i)
    EMBER_CHECK(xs[i]->rank() == in_shapes_[i].rank() + 1 && xs[i]->shape().without_batch() == in_shapes_[i] &&
                    xs[i]->dim(0) == n && xs[i]->device() == xs[0]->device(),
                ShapeError,
                "Concatenate: input " + std::to_string(i) + " must be (" + std::to_string(n) + ", " +
                    in_shapes_[i].str() + "), given " + xs[i]->str());
  int64_t per_sample_outer = 1;  // rows per sample: the axes before the concatenation axis
  for (int d = 0; d < sample_axis_; ++d) per_sample_outer *= in_shapes_[0][d];
  const int64_t rows = n * per_sample_outer;
  const int64_t total = out_.numel() / per_sample_outer;
  ensure(y_, out_.with_batch(n), DType::F32, xs[0]->device());
  rowmajor_.resize(xs.size());
  int64_t offset = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = as_layout(*xs[i], Layout::RowMajor, rowmajor_[i]);
    detail::elementwise_copy_columns(x, widths_[i], 0, y_, total, offset, rows, widths_[i]);
    offset += widths_[i];
  }
  return y_;
}

const std::vector<Tensor>& Concatenate::do_backward_inputs(const Tensor& dy) {
  const Tensor& g = as_layout(dy, Layout::RowMajor, dy_copy_);
  const int64_t n = g.dim(0);
  int64_t per_sample_outer = 1;
  for (int d = 0; d < sample_axis_; ++d) per_sample_outer *= in_shapes_[0][d];
  const int64_t rows = n * per_sample_outer;
  const int64_t total = out_.numel() / per_sample_outer;
  dxs_.resize(widths_.size());
  int64_t offset = 0;
  for (size_t i = 0; i < widths_.size(); ++i) {
    ensure(dxs_[i], in_shapes_[i].with_batch(n), DType::F32, g.device());
    detail::elementwise_copy_columns(g, total, offset, dxs_[i], widths_[i], 0, rows, widths_[i]);
    offset += widths_[i];
  }
  return dxs_;
}

LayerConfig Concatenate::config() const { return {{"axis", config_value(int64_t{axis_})}}; }

}  // namespace ember
