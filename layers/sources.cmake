# layers/: the layers, their per-op dispatch (ops/) and backends (cpu/, cuda/), the loss and
# metrics, Sequential with its fit loop, progress bar and checkpoints.
ember_folder(layers
  PUBLIC_HEADERS layers.h activation.h checkpoint.h conv2d.h dense.h flatten.h geometry.h layer.h loss.h matmul.h
                 maxpool2d.h metrics.h relu.h sequential.h
  SOURCES activation.cpp checkpoint.cpp conv2d.cpp cuda_ops.cpp dense.cpp fit.cpp flatten.cpp geometry.cpp layer.cpp
          loss.cpp matmul.cpp maxpool2d.cpp metrics.cpp progress.cpp relu.cpp sequential.cpp
          ops/conv2d.cpp ops/dense.cpp ops/maxpool2d.cpp ops/relu.cpp ops/softmax_xent.cpp
          cpu/conv2d.cpp cpu/dense.cpp cpu/maxpool2d.cpp cpu/relu.cpp cpu/softmax_xent.cpp
  CUDA_SOURCES cuda/conv2d.cpp cuda/dense.cpp cuda/dense_kernels.cu cuda/maxpool2d.cpp cuda/ops_table.cpp cuda/pad.cu
               cuda/relu.cu cuda/softmax_xent.cu)
