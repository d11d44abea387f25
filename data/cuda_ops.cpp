// data_cuda_ops(): the data pipeline's table from the CUDA module (see cuda_ops.h).
#include "cuda_ops.h"

#include "../core/dispatch.h"

namespace ember::detail {

const DataCudaOps& data_cuda_ops() { return cuda_ops<DataCudaOps>("a DataLoader on a GPU"); }

}  // namespace ember::detail
