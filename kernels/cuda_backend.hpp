// The CUDA replay backend: what `rlparity replay --backend cuda` hands to run_replay. No CUDA
// header here, so the CLI includes it with the plain C++ toolchain.
#pragma once
#include <memory>
#include <string>

#include "rlparity/replay/path_runner.hpp"

namespace rlp::cuda {

// The generation and training paths on device 0 (CudaOps); info = device name, compute
// capability, driver/runtime/cuBLASLt versions and how GEMMs run. Throws rlp::Error
// "no CUDA device: <reason>" when no device is usable.
// gemm: "cublaslt" (cuBLASLt's own order) or "exact" (the emulator's order: the CPU's bits); any
// other value throws rlp::Error naming it.
std::shared_ptr<const ReplayBackend> make_replay_backend(const std::string& gemm = "cublaslt");

}  // namespace rlp::cuda
