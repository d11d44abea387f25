# The Ember::ember library: every module folder's sources, plus the CUDA backend when enabled.

# Each module folder lists its own files in <folder>/sources.cmake (ember_folder below), so
# adding a file never edits this one. The public headers (PUBLIC_HEADERS) are ember.h and
# everything it includes, no more: they are installed (under include/ember/, keeping their
# folders), each is compiled alone by the tests, and scripts/check_layering.py checks that the
# folders' lists are exactly what ember.h reaches.

add_library(ember)
set(EMBER_PUBLIC_HEADERS ember.h)
set(EMBER_CUDA_SOURCES ember_cuda.cpp)  # the CUDA module's entry point: assembles every folder's op table

# ember_folder(<folder> [PUBLIC_HEADERS h...] [SOURCES f...] [CUDA_SOURCES f...]), paths relative
# to the folder: SOURCES build libember, CUDA_SOURCES the CUDA module (when CUDA is on).
function(ember_folder folder)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "PUBLIC_HEADERS;SOURCES;CUDA_SOURCES")
  foreach(kind PUBLIC_HEADERS SOURCES CUDA_SOURCES)
    list(TRANSFORM arg_${kind} PREPEND ${folder}/)
  endforeach()
  target_sources(ember PRIVATE ${arg_SOURCES})
  set(EMBER_PUBLIC_HEADERS ${EMBER_PUBLIC_HEADERS} ${arg_PUBLIC_HEADERS} PARENT_SCOPE)
  set(EMBER_CUDA_SOURCES ${EMBER_CUDA_SOURCES} ${arg_CUDA_SOURCES} PARENT_SCOPE)
endfunction()

foreach(folder core data optim layers distribute)
  include(${folder}/sources.cmake)
endforeach()

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
# The fused conv + pool, the direct weight gradient, the Winograd kernels' and the Dense weight
# gradient's sums as fused multiply-adds: the same bits every run, like oneDNN's FMA kernels. GCC
# contracts C++ by default (-ffp-contract=off is its default for ISO C only); said here so that
# these kernels keep their FMAs under a compiler or flags that would not.
set_source_files_properties(layers/cpu/conv2d_direct.cpp layers/cpu/conv2d_maxpool.cpp layers/cpu/conv2d_winograd.cpp
                            layers/cpu/conv2d_winograd_data.cpp layers/cpu/dense.cpp
                            PROPERTIES COMPILE_OPTIONS "-ffp-contract=fast")
# The elementwise loops whose formulas select with comparisons (layers/pointwise_math.h's
# exp_poly and tanh_poly clamp, and keep a NaN; the bf16 rounding keeps a NaN, a fused ReLU's
# gradient masks): GCC if-converts such selects into blends, so that
# the loops vectorise, only when it may assume that float operations do not trap. Ember never
# enables float traps; the arithmetic and its rounding are unchanged.
set_source_files_properties(layers/cpu/pointwise.cpp layers/cpu/bf16.cpp layers/cpu/conv2d_bf16.cpp
                            PROPERTIES COMPILE_OPTIONS "-fno-trapping-math")
# The CUDA backend: a separate module that libember dlopens on first use (core/cuda_module.h),
# so that libember itself links no CUDA library.
if(EMBER_HAVE_CUDA)
  add_library(ember_cuda SHARED ${EMBER_CUDA_SOURCES})
  # One CUDA runtime per process, the shared one (CMake's default for .cu targets adds the static
  # cudart too): the module and the programs that call it see the same current device and streams.
  set_target_properties(ember_cuda PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
                                              CUDA_RUNTIME_LIBRARY Shared)
  target_link_libraries(ember_cuda PUBLIC ember CUDA::cudart CUDA::cublas CUDA::cublasLt CUDNN::cudnn PRIVATE ember_warnings)
  # The architectures this module has code for: the status probe decides from them, without a
  # context on every GPU (core/cuda_arch.h).
  string(REPLACE ";" "," _ember_archs "${CMAKE_CUDA_ARCHITECTURES}")
  target_compile_definitions(ember_cuda PRIVATE EMBER_CUDA_ARCHS="${_ember_archs}")
  if(EMBER_HAVE_NCCL)
    target_link_libraries(ember_cuda PUBLIC NCCL::nccl)
    target_compile_definitions(ember_cuda PRIVATE EMBER_WITH_NCCL=1)
  endif()
  target_compile_definitions(ember PRIVATE
    EMBER_CUDA_MODULE="${CMAKE_SHARED_LIBRARY_PREFIX}ember_cuda${CMAKE_SHARED_LIBRARY_SUFFIX}.${PROJECT_VERSION_MAJOR}")
endif()
# The MPI communicator: a module libember loads when MultiWorker asks for it
# (distribute/mpi_loader.cpp), so a program that never does needs no MPI library to start.
if(EMBER_HAVE_MPI)
  add_library(ember_mpi SHARED distribute/mpi_communicator.cpp)
  # INSTALL_RPATH_USE_LINK_PATH: an MPI outside the system paths (/opt, spack) is still found
  # once installed.
  set_target_properties(ember_mpi PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
                                             INSTALL_RPATH_USE_LINK_PATH TRUE)
  target_link_libraries(ember_mpi PUBLIC ember PRIVATE MPI::MPI_CXX ember_warnings)
  target_compile_definitions(ember_mpi PRIVATE EMBER_VERSION="${PROJECT_VERSION}")
  target_compile_definitions(ember PRIVATE
    EMBER_MPI_MODULE="${CMAKE_SHARED_LIBRARY_PREFIX}ember_mpi${CMAKE_SHARED_LIBRARY_SUFFIX}.${PROJECT_VERSION_MAJOR}")
endif()
