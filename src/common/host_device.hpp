// Qualifiers for code that compiles both as plain C++ (g++, the CPU reference and host planner) and as CUDA
// (nvcc, the device code): src/common and src/plan.
#pragma once

#if defined(__CUDACC__)
#define MOK_HOST_DEVICE __host__ __device__
#define MOK_INLINE __forceinline__
#else
#define MOK_HOST_DEVICE
#define MOK_INLINE inline
#endif
