// Every CUDA runtime and cuBLASLt call goes through these checks: a failure throws rlp::Error whose
// message names the call, the file and the line ("cudaMalloc(...) failed at kernels/x.cu:12: out of memory").
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "rlparity/util/error.hpp"

namespace rlp::cuda::detail {
inline std::string where(const char* file, int line) {
  return std::string(file) + ":" + std::to_string(line);
}
}  // namespace rlp::cuda::detail

#define RLP_CUDA_CHECK(call)                                                         \
  do {                                                                               \
    cudaError_t rlp_err_ = (call);                                                   \
    if (rlp_err_ != cudaSuccess)                                                     \
      throw ::rlp::Error(__FILE__, __LINE__,                                         \
                         std::string(#call) + " failed at " +                        \
                             ::rlp::cuda::detail::where(__FILE__, __LINE__) + ": " + \
                             cudaGetErrorString(rlp_err_));                          \
  } while (0)

#define RLP_CUBLAS_CHECK(call)                                                                     \
  do {                                                                                             \
    cublasStatus_t rlp_st_ = (call);                                                               \
    if (rlp_st_ != CUBLAS_STATUS_SUCCESS)                                                          \
      throw ::rlp::Error(__FILE__, __LINE__,                                                       \
                         std::string(#call) + " failed at " +                                      \
                             ::rlp::cuda::detail::where(__FILE__, __LINE__) + ": cublas status " + \
                             std::to_string(static_cast<int>(rlp_st_)));                           \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, with the kernel's name.
#define RLP_CUDA_CHECK_LAUNCH(name) RLP_CUDA_CHECK(((void)(name), cudaGetLastError()))
