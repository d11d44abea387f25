# The Ember::ember library: every module folder's sources, plus the CUDA backend when enabled.

# The public headers: ember.h and everything it includes, no more. They are installed (under
# include/ember/, keeping their folders), each is compiled alone by the tests, and
# scripts/check_layering.py checks that this list is exactly what ember.h reaches.
set(EMBER_PUBLIC_HEADERS
  ember.h
  core/caching_allocator.h core/device.h core/error.h core/log.h core/rng.h core/runtime.h core/safetensors.h core/shape.h
  core/tensor.h
  data/dataloader.h data/dataset.h data/idx.h data/mnist.h
  distribute/communicator.h distribute/strategy.h
  layers/activation.h layers/checkpoint.h layers/conv2d.h layers/dense.h layers/flatten.h layers/layer.h
  layers/loss.h layers/matmul.h layers/metrics.h layers/maxpool2d.h layers/geometry.h layers/relu.h layers/sequential.h
  optim/adam.h optim/optimizer.h optim/sgd.h
)

set(EMBER_SOURCES
  core/caching_allocator.cpp core/cuda_module.cpp core/device.cpp core/error.cpp core/log.cpp core/runtime.cpp core/safetensors.cpp core/shape.cpp core/tensor.cpp
  core/cpu/cpu_check.cpp core/cpu/dnnl_context.cpp core/cpu/gemm.cpp core/cpu/host_allocator.cpp
  layers/activation.cpp layers/conv2d.cpp layers/dense.cpp layers/flatten.cpp layers/layer.cpp
  layers/cuda_ops.cpp layers/loss.cpp layers/matmul.cpp layers/maxpool2d.cpp layers/geometry.cpp layers/progress.cpp layers/relu.cpp
  layers/checkpoint.cpp layers/fit.cpp layers/metrics.cpp layers/sequential.cpp
  layers/ops/conv2d.cpp layers/ops/dense.cpp layers/ops/maxpool2d.cpp layers/ops/relu.cpp layers/ops/softmax_xent.cpp
  layers/cpu/conv2d.cpp layers/cpu/dense.cpp layers/cpu/maxpool2d.cpp
  layers/cpu/relu.cpp layers/cpu/softmax_xent.cpp
  optim/adam.cpp optim/cuda_ops.cpp optim/optimizer.cpp optim/sgd.cpp optim/cpu/adam.cpp optim/cpu/sgd.cpp
  data/cuda_ops.cpp data/dataloader.cpp data/dataset.cpp data/cpu/gather.cpp data/idx.cpp data/mnist.cpp
  distribute/communicator.cpp distribute/data_parallel.cpp distribute/local_communicator.cpp distribute/multiworker.cpp distribute/nccl_communicator.cpp
  distribute/strategy.cpp
)
if(EMBER_HAVE_MPI)
  list(APPEND EMBER_SOURCES distribute/mpi_communicator.cpp)
else()
  list(APPEND EMBER_SOURCES distribute/mpi_communicator_stub.cpp)
endif()

add_library(ember ${EMBER_SOURCES})
add_library(Ember::ember ALIAS ember)
set_target_properties(ember PROPERTIES EXPORT_NAME ember OUTPUT_NAME ember VERSION ${PROJECT_VERSION}
                                       SOVERSION ${PROJECT_VERSION_MAJOR})
# Ember's own files include each other by relative paths ("../core/tensor.h"), so no folder on a
# consumer's include path can stand in for one of them. Consumers get one include root, in which
# <ember/ember.h> is the umbrella: <prefix>/include once installed; in a build tree, a folder
# whose "ember" entry links to this source tree.
file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/include)
file(CREATE_LINK ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/include/ember SYMBOLIC)
target_include_directories(ember PUBLIC
  $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)  # #include <ember/ember.h>
target_compile_features(ember PUBLIC cxx_std_20)
# Nothing here reaches a consumer's compile line but C++20 and the include root: spdlog stays
# inside (core/log.h is spdlog-free), and the version is ember::version().
target_link_libraries(ember
  PUBLIC Threads::Threads
  PRIVATE ember_warnings spdlog::spdlog DNNL::dnnl OpenMP::OpenMP_CXX ZLIB::ZLIB nlohmann_json::nlohmann_json
          ${CMAKE_DL_LIBS})
target_compile_definitions(ember PRIVATE EMBER_VERSION="${PROJECT_VERSION}")
if(EMBER_CPU_ARCH AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  target_compile_options(ember PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=${EMBER_CPU_ARCH}>)
  target_compile_definitions(ember PRIVATE EMBER_CPU_ARCH="${EMBER_CPU_ARCH}")
  # The check that the CPU can run the kernels must itself run on any x86-64.
  set_source_files_properties(core/cpu/cpu_check.cpp PROPERTIES COMPILE_OPTIONS "-march=x86-64")
endif()
# The CUDA backend: a separate module that libember dlopens on first use (core/cuda_module.h),
# so that libember itself links no CUDA library.
if(EMBER_HAVE_CUDA)
  add_library(ember_cuda SHARED
    ember_cuda.cpp  # the entry point: assembles every folder's op table
    core/cuda/context.cpp core/cuda/elementwise.cu core/cuda/memory.cpp core/cuda/status.cpp
    core/cuda/versions.cpp core/cuda/probe.cu
    data/cuda/gather.cu data/cuda/ops_table.cpp distribute/cuda/nccl.cpp
    layers/cuda/conv2d.cpp layers/cuda/dense.cpp layers/cuda/dense_kernels.cu layers/cuda/maxpool2d.cpp
    layers/cuda/ops_table.cpp layers/cuda/pad.cu layers/cuda/relu.cu layers/cuda/softmax_xent.cu
    optim/cuda/adam.cu optim/cuda/ops_table.cpp optim/cuda/sgd.cu)
  set_target_properties(ember_cuda PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
  target_link_libraries(ember_cuda PUBLIC ember CUDA::cudart CUDA::cublas CUDNN::cudnn PRIVATE ember_warnings)
  if(EMBER_HAVE_NCCL)
    target_link_libraries(ember_cuda PUBLIC NCCL::nccl)
    target_compile_definitions(ember_cuda PRIVATE EMBER_WITH_NCCL=1)
  endif()
  target_compile_definitions(ember PRIVATE
    EMBER_CUDA_MODULE="${CMAKE_SHARED_LIBRARY_PREFIX}ember_cuda${CMAKE_SHARED_LIBRARY_SUFFIX}.${PROJECT_VERSION_MAJOR}")
endif()
if(EMBER_HAVE_MPI)
  target_link_libraries(ember PRIVATE MPI::MPI_CXX)
endif()
