// The CUDA replay backend: what `rlparity replay --backend cuda` hands to run_replay. No CUDA
// header here, so the CLI includes it with the plain C++ toolchain.
#pragma once
#include <memory>

#include "rlparity/replay/path_runner.hpp"

namespace rlp::cuda {

// The generation and training paths on device 0 (CudaOps); info = device name, compute
// capability, driver/runtime/cuBLASLt versions and how GEMMs run. Throws rlp::Error
// "no CUDA device: <reason>" when no device is usable.
std::shared_ptr<const ReplayBackend> make_replay_backend();

}  // namespace rlp::cuda
