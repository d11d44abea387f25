// Move-only RAII owners of cuDNN descriptors (part of the CUDA module). Created in the
// constructor (CudnnError on failure), destroyed in the destructor, which never throws; they
// convert to the raw handle, so they pass straight to cuDNN calls.
#pragma once

#include <cudnn.h>

#include <utility>

#include "../../core/cuda/check.h"

namespace ember::cuda {

template <typename Handle, cudnnStatus_t (*Create)(Handle*), cudnnStatus_t (*Destroy)(Handle)>
class CudnnDescriptor {
 public:
  CudnnDescriptor() { EMBER_CUDNN_CHECK(Create(&h_)); }
  ~CudnnDescriptor() {
    if (h_) Destroy(h_);  // a failed destroy only leaks: nothing to report from a destructor
  }
  CudnnDescriptor(CudnnDescriptor&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  CudnnDescriptor& operator=(CudnnDescriptor&& o) noexcept {
    if (this != &o) {
      if (h_) Destroy(h_);
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;

  operator Handle() const { return h_; }  // NOLINT: passed to cuDNN as the handle

 private:
  Handle h_ = nullptr;
};

using TensorDesc = CudnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = CudnnDescriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    CudnnDescriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using ActivationDesc =
    CudnnDescriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor>;

// A tensor descriptor for an (N, C, H, W) tensor (f32 unless `type` says otherwise) stored
// row-major (NCHW) or channels-last.
inline TensorDesc nchw_desc(int n, int c, int h, int w, bool nhwc = false, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
  TensorDesc d;
  EMBER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, type, n, c, h, w));
  return d;
}

}  // namespace ember::cuda
