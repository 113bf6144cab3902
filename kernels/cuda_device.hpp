// The CUDA device this process uses, what it is, and what it can do.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace rlp::cuda {

struct DeviceInfo {
  int device = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int driver_version = 0;            // cudaDriverGetVersion, e.g. 12080 = 12.8
  int runtime_version = 0;           // cudaRuntimeGetVersion
  std::size_t cublaslt_version = 0;  // cublasLtGetVersion at run time, e.g. 120903
  int cublaslt_header_version = 0;   // CUBLAS_VERSION this binary was compiled against
  nlohmann::json to_json() const;    // what the run file records
};

// The device of this process's rank on its node (device 0 for one process), or rlp::Error "no CUDA
// device: <cudaGetErrorString>" when there is none.
DeviceInfo require_device();

// Block-scaled FP8 GEMM through cuBLASLt (VEC128_32F x BLK128x128_32F) needs cuBLAS >= 12.9 at
// compile and run time and an sm_90 device. False with the reason otherwise.
bool fp8_blockscaled_supported(const DeviceInfo& d, std::string* why);

}  // namespace rlp::cuda
