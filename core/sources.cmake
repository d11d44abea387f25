# core/: tensors, devices, errors, logging, the CPU GEMM and the CUDA module's core.
ember_folder(core
  PUBLIC_HEADERS core.h caching_allocator.h cuda_graph.h device.h error.h log.h output_file.h rng.h runtime.h safetensors.h shape.h
                 tensor.h
  SOURCES caching_allocator.cpp cuda_arch.cpp cuda_graph.cpp cuda_module.cpp device.cpp error.cpp log.cpp output_file.cpp runtime.cpp pairwise_sum.cpp safetensors.cpp
          shape.cpp
          tensor.cpp cpu/cpu_check.cpp cpu/cpu_load.cpp cpu/dnnl_context.cpp cpu/gemm.cpp cpu/host_allocator.cpp
  CUDA_SOURCES cuda/context.cpp cuda/elementwise.cu cuda/memory.cpp cuda/status.cpp cuda/versions.cpp cuda/probe.cu)
