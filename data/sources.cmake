# data/: IDX, MNIST and text readers, datasets, the batch loader.
ember_folder(data
  PUBLIC_HEADERS csv.h data.h dataloader.h dataset.h idx.h mnist.h text.h
  SOURCES csv.cpp cuda_ops.cpp dataloader.cpp dataset.cpp idx.cpp mnist.cpp text.cpp cpu/gather.cpp
  CUDA_SOURCES cuda/gather.cu cuda/ops_table.cpp)
