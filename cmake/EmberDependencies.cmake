# Finds Ember's dependencies and decides EMBER_HAVE_CUDA / EMBER_HAVE_MPI from the AUTO|ON|OFF options.

find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)   # oneDNN (Debian) runs on OpenMP: Ember's kernels share its pool
find_package(dnnl 2.6 CONFIG REQUIRED)          # CPU backend: sgemm, convolution primitives
find_package(spdlog CONFIG REQUIRED)
find_package(ZLIB REQUIRED)                    # .gz IDX files
find_package(nlohmann_json 3 CONFIG REQUIRED)  # history files, checkpoint headers

# --- CUDA: cuBLAS + cuDNN (+ NCCL when found) ---------------------------------------------------
set(EMBER_HAVE_CUDA OFF)
set(EMBER_HAVE_NCCL OFF)
if(NOT EMBER_CUDA STREQUAL "OFF")
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
    find_package(CUDNN QUIET)
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND TARGET CUDA::cublas AND TARGET CUDA::cublasLt AND CUDNN_FOUND)
    set(EMBER_HAVE_CUDA ON)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)  # sm_90 SASS + compute_90 PTX; override with -DCMAKE_CUDA_ARCHITECTURES=...
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc's C++20 flag (nvcc >= 12 has it): tell it, so that the
    # module's launchers can include Ember's C++20 headers.
    if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(NCCL QUIET)
    if(NCCL_FOUND)
      set(EMBER_HAVE_NCCL ON)
    endif()
  elseif(EMBER_CUDA STREQUAL "ON")
    message(FATAL_ERROR "EMBER_CUDA=ON but the CUDA toolchain is incomplete: nvcc='${CMAKE_CUDA_COMPILER}' "
                        "CUDAToolkit=${CUDAToolkit_FOUND} cuDNN=${CUDNN_FOUND}. Set CUDNN_ROOT or use EMBER_CUDA=OFF.")
  endif()
endif()

# --- MPI -------------------------------------------------------------------------------------------
set(EMBER_HAVE_MPI OFF)
if(NOT EMBER_MPI STREQUAL "OFF")
  find_package(MPI QUIET COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(EMBER_HAVE_MPI ON)
  elseif(EMBER_MPI STREQUAL "ON")
    message(FATAL_ERROR "EMBER_MPI=ON but no MPI was found (Debian: apt-get install libopenmpi-dev)")
  endif()
endif()
