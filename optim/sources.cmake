# optim/: optimizers and their update kernels.
ember_folder(optim
  PUBLIC_HEADERS optim.h adam.h optimizer.h rmsprop.h sgd.h
  SOURCES adam.cpp cuda_ops.cpp optimizer.cpp rmsprop.cpp sgd.cpp cpu/adam.cpp cpu/regularize.cpp cpu/rmsprop.cpp cpu/sgd.cpp
  CUDA_SOURCES cuda/adam.cu cuda/ops_table.cpp cuda/regularize.cu cuda/rmsprop.cu cuda/sgd.cu)
