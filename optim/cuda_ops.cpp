// optim_cuda_ops(): the optimizers' table from the CUDA module (see cuda_ops.h).
#include "cuda_ops.h"

#include "../core/dispatch.h"

namespace ember::detail {

const OptimCudaOps& optim_cuda_ops() { return cuda_ops<OptimCudaOps>("an optimizer's parameters are on a GPU"); }

}  // namespace ember::detail
