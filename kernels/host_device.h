// KVTIER_HD marks the element functions a CUDA kernel and its CPU reference
// share (the llm.c habit: one copy of the arithmetic, checked on every
// machine). Under nvcc it is `__host__ __device__`; under the C++ compiler it
// is nothing, so these headers are plain C++ (C++17, nvcc's dialect here).
#pragma once

#if defined(__CUDACC__)
#define KVTIER_HD __host__ __device__
#else
#define KVTIER_HD
#endif
