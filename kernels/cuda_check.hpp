// Every CUDA runtime and cuBLASLt call goes through these checks: a failure throws rlp::Error with
// the call, file and line.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "rlparity/util/error.hpp"

#define RLP_CUDA_CHECK(call)                                                                  \
  do {                                                                                        \
    cudaError_t rlp_err_ = (call);                                                            \
    if (rlp_err_ != cudaSuccess)                                                              \
      throw ::rlp::Error(__FILE__, __LINE__,                                                  \
                         std::string(#call) + " failed: " + cudaGetErrorString(rlp_err_));   \
  } while (0)

#define RLP_CUBLAS_CHECK(call)                                                               \
  do {                                                                                       \
    cublasStatus_t rlp_st_ = (call);                                                         \
    if (rlp_st_ != CUBLAS_STATUS_SUCCESS)                                                    \
      throw ::rlp::Error(__FILE__, __LINE__, std::string(#call) + " failed: cublas status " + \
                                                 std::to_string(static_cast<int>(rlp_st_)));  \
  } while (0)
