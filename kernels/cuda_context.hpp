// One per process: the device, its cuBLASLt handle and workspace, scratch buffers, and the lock
// that serializes GPU work (replay calls the ops from several CPU threads; each op uploads its
// inputs, computes and downloads on the default stream, one op at a time).
#pragma once
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "cuda_device.hpp"
#include "device_buffer.hpp"
#include "lt_gemm.hpp"

namespace rlp::cuda {

// How GEMMs (and the reductions around them) run on the GPU (--cuda-gemm):
//   cublaslt: cuBLASLt's own tiling and accumulation order (tensor cores), block tree reductions
//             and rsqrtf in the norms: what the hardware's libraries compute;
//   exact:    the emulator's stated order in CUDA kernels (gemm_exact.cu, sequential norm sums,
//             IEEE 1/sqrt), so that the GPU reproduces the CPU emulator's bits.
enum class GemmMode { cublaslt, exact };

class CudaContext {
 public:
  // Throws rlp::Error "no CUDA device: <cudaGetErrorString>" when there is no usable device.
  static std::shared_ptr<CudaContext> create(GemmMode mode = GemmMode::cublaslt);
  GemmMode mode() const { return mode_; }
  bool exact() const { return mode_ == GemmMode::exact; }
  // With RLPARITY_CUDA_GEMM_TIMING=1, prints the GEMM time statistics on stderr.
  ~CudaContext();

  const DeviceInfo& info() const { return info_; }
  // Block-scaled FP8 GEMM available (cuBLAS >= 12.9, sm_90, or any device in exact mode);
  // otherwise fp8_why() says why.
  bool fp8_ok() const { return fp8_ok_; }
  const std::string& fp8_why() const { return fp8_why_; }
  LtGemm& gemm() { return *gemm_; }
  std::mutex& mutex() { return mu_; }
  // Prints "rlparity: note: --backend cuda: <msg>" to stderr the first time `msg` is seen.
  void note_once(const std::string& msg);

  static constexpr int kSlots = 12;
  // Device scratch buffer number `slot` with room for n elements of T (caller holds mutex()).
  template <class T>
  T* scratch(int slot, std::size_t n) {
    return reinterpret_cast<T*>(slots_[slot].ensure(n * sizeof(T)));
  }

 private:
  CudaContext() = default;
  DeviceInfo info_;
  GemmMode mode_ = GemmMode::cublaslt;
  bool fp8_ok_ = false;
  std::string fp8_why_;
  std::unique_ptr<LtGemm> gemm_;
  std::mutex mu_, note_mu_;
  std::set<std::string> notes_;
  DeviceBuffer<char> slots_[kSlots];
};

}  // namespace rlp::cuda
