// EMBER_HD: a function the CPU code and the CUDA kernels both call (__host__ __device__ under
// nvcc, nothing otherwise), for the formula headers shared by the two backends (losses_math.h,
// pointwise_math.h). Private to the library.
#pragma once

#ifdef __CUDACC__
#define EMBER_HD __host__ __device__
#else
#define EMBER_HD
#endif
