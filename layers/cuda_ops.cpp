// layer_cuda_ops(): the layers' table from the CUDA module (see cuda_ops.h).
#include "cuda_ops.h"

#include "../core/dispatch.h"

namespace ember::detail {

const LayerCudaOps& layer_cuda_ops() { return cuda_ops<LayerCudaOps>("a layer's tensors are on a GPU"); }

}  // namespace ember::detail
