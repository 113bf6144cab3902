#include "cuda_device.hpp"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "cublaslt_api.hpp"
#include "cuda_check.hpp"
#include "rlparity/dist/job.hpp"

namespace rlp::cuda {

namespace {
// CUDA driver/runtime versions are 1000 * major + 10 * minor (12080 = 12.8).
std::string cuda_version(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }
// cuBLAS versions are 10000 * major + 100 * minor + patch (120903 = 12.9.3).
std::string cublas_version(long long v) {
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}
}  // namespace

nlohmann::json DeviceInfo::to_json() const {
  return {{"cuda_device", device},
          {"cuda_device_name", name},
          {"cuda_compute_capability", fmt::format("{}.{}", cc_major, cc_minor)},
          {"cuda_driver_version", cuda_version(driver_version)},
          {"cuda_runtime_version", cuda_version(runtime_version)},
          {"cublaslt_version", cublas_version(static_cast<long long>(cublaslt_version))},
          {"cublaslt_header_version", cublas_version(cublaslt_header_version)}};
}

DeviceInfo require_device() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) throw Error(std::string("no CUDA device: ") + cudaGetErrorString(err));
  if (count == 0) throw Error("no CUDA device: cudaGetDeviceCount found 0 devices");
  // In a job of several ranks (dist/job.hpp) each rank takes the GPU of its rank on its node.
  const Job& job = Job::current();
  if (job.local_rank() >= count)
    throw Error(
        fmt::format("rank {} is rank {} of {} on its node, which has {} CUDA device(s): start at most "
                    "one rank per GPU on each node",
                    job.rank(), job.local_rank(), job.local_size(), count));
  DeviceInfo d;
  d.device = job.local_rank();
  RLP_CUDA_CHECK(cudaSetDevice(d.device));
  cudaDeviceProp prop{};
  RLP_CUDA_CHECK(cudaGetDeviceProperties(&prop, d.device));
  d.name = prop.name;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  RLP_CUDA_CHECK(cudaDriverGetVersion(&d.driver_version));
  RLP_CUDA_CHECK(cudaRuntimeGetVersion(&d.runtime_version));
  d.cublaslt_version = cublaslt().GetVersion();
  d.cublaslt_header_version = CUBLAS_VERSION;
  return d;
}

bool fp8_blockscaled_supported(const DeviceInfo& d, std::string* why) {
  auto no = [&](std::string s) {
    if (why) *why = std::move(s);
    return false;
  };
#if CUBLAS_VERSION < 120900
  return no(fmt::format("this binary was compiled against cuBLAS {} (block-scaled FP8 needs >= 12.9)",
                        CUBLAS_VERSION));
#else
  if (d.cublaslt_version < 120900)
    return no(fmt::format("the cuBLASLt library loaded at run time is {} (block-scaled FP8 needs >= 12.9)",
                          d.cublaslt_version));
  if (d.cc_major != 9 || d.cc_minor != 0)
    return no(
        fmt::format("device {} is sm_{}{} (cuBLASLt's VEC128/BLK128x128 FP8 scaling is an sm_90 feature)",
                    d.name, d.cc_major, d.cc_minor));
  return true;
#endif
}

}  // namespace rlp::cuda
