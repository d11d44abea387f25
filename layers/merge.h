/// @file
/// Merge layers (Keras' Add, Subtract, Multiply, Average, Maximum, Concatenate): several inputs of
/// a graph model (layers/model/graph.h), one output.
///
/// @code
///   auto x = Input(Shape{16, 8, 8});
///   auto h = layer<Conv2D>(16, Size2{3, 3}, Activation::ReLU, Padding::Same)(x);
///   auto y = add({x, h});                       // or layer<Add>()({x, h})
/// @endcode
///
/// The elementwise ones take inputs of one per-sample shape (Subtract exactly two) and return that
/// shape, in the first input's layout (the others are converted to it). Maximum's gradient goes to
/// the first input holding the maximum (TensorFlow's rule; PyTorch splits a tie evenly).
/// Concatenate joins along `axis`, counted over (N, ...) as Keras counts it (negative: from the
/// end; the batch axis 0 is refused); its default 1 is the channels of NCHW (Keras' default -1 is
/// the channels of its NHWC) and the features of (N, F). Its output is row-major.
/// Every merge layer's rows are independent, and none has parameters.
#pragma once

#include <vector>

#include "layer.h"

namespace ember {

/// What every merge layer shares: several inputs, the one-input interface refused.
class Merge : public Layer {
 public:
  bool multi_input() const override { return true; }
  bool rows_independent(bool /*training*/) const override { return true; }
  Shape build(const Shape& sample_shape) override;  ///< ArgumentError: takes two or more inputs

 protected:
  const Tensor& do_forward(const Tensor& x, bool training) override;  ///< ArgumentError, as build
  const Tensor& do_backward(const Tensor& dy) override;               ///< Error
  void do_release_buffers() override;
  /// Two or more inputs (exactly `count` when it is > 0), each of one rank (ShapeError else).
  void check_inputs(const std::vector<Shape>& shapes, size_t count) const;
  std::vector<Tensor> dxs_;  ///< backward's result: one per input
};

/// Add, Subtract, Multiply, Average, Maximum: one elementwise merge.
class ElementwiseMerge : public Merge {
 public:
  /// Which elementwise merge: the sum, x0 - x1, the product, the mean or the maximum of the inputs.
  enum class Kind { Add, Subtract, Multiply, Average, Maximum };
  /// A merge of `kind` (its type() is the kind's name: "Add", ...).
  explicit ElementwiseMerge(Kind kind) : kind_(kind) {}
  std::string type() const override;
  Shape build_inputs(const std::vector<Shape>& sample_shapes) override;
  std::string kernel_info(int64_t /*batch*/, Device device) const override {
    return device.is_cuda() ? "ember CUDA elementwise" : "ember cpu elementwise";
  }

 protected:
  const Tensor& do_forward_inputs(const std::vector<const Tensor*>& xs, bool training) override;
  const std::vector<Tensor>& do_backward_inputs(const Tensor& dy) override;
  void do_release_buffers() override;

 private:
  Kind kind_;
  std::vector<Tensor> xs_, converted_;  // the inputs in the first one's layout (shallow / converted)
  std::vector<Tensor> grads_scratch_;   // Multiply's and Maximum's per-input gradients
  Tensor y_, dy_copy_, claimed_;
};

/// Keras' Add: the elementwise sum of the inputs.
class Add : public ElementwiseMerge {
 public:
  Add() : ElementwiseMerge(Kind::Add) {}
};
/// Keras' Subtract: x0 - x1, of exactly two inputs.
class Subtract : public ElementwiseMerge {
 public:
  Subtract() : ElementwiseMerge(Kind::Subtract) {}
};
/// Keras' Multiply: the elementwise product of the inputs.
class Multiply : public ElementwiseMerge {
 public:
  Multiply() : ElementwiseMerge(Kind::Multiply) {}
};
/// Keras' Average: the elementwise mean of the inputs.
class Average : public ElementwiseMerge {
 public:
  Average() : ElementwiseMerge(Kind::Average) {}
};
/// Keras' Maximum: the elementwise maximum of the inputs; its gradient goes to the first input
/// holding the maximum.
class Maximum : public ElementwiseMerge {
 public:
  Maximum() : ElementwiseMerge(Kind::Maximum) {}
};

/// Keras' Concatenate: the inputs joined along `axis` (see merge.h); row-major output.
class Concatenate : public Merge {
 public:
  /// Joins along `axis`, counted over (N, ...) (negative: from the end; the batch axis 0 is refused
  /// at build).
  explicit Concatenate(int axis = 1) : axis_(axis) {}
  std::string type() const override { return "Concatenate"; }
  int axis() const { return axis_; }  ///< The axis as given to the constructor.
  LayerConfig config() const override;
  Shape build_inputs(const std::vector<Shape>& sample_shapes) override;
  std::string kernel_info(int64_t /*batch*/, Device device) const override {
    return device.is_cuda() ? "strided copies (cudaMemcpy2DAsync)" : "strided copies";
  }

 protected:
  const Tensor& do_forward_inputs(const std::vector<const Tensor*>& xs, bool training) override;
  const std::vector<Tensor>& do_backward_inputs(const Tensor& dy) override;
  void do_release_buffers() override;

 private:
  int axis_;
  int sample_axis_ = 0;           // axis_ within the per-sample shape
  std::vector<int64_t> widths_;   // per input: its elements from the axis on, per outer row
  std::vector<Tensor> rowmajor_;  // converted inputs
  std::vector<Shape> in_shapes_;  // per sample
  Shape out_;                     // per sample
  Tensor y_, dy_copy_;
};

}  // namespace ember
