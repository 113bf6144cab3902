// cuBLASLt, loaded when the CUDA backend first needs it. Linking libcublasLt would run its static
// constructors in every process: 0.33 s and about 200 MB of resident memory at the start of each
// `rlparity` command, CPU replays included (measured: `rlparity --version`, 0.41 s and 224 MB
// linked, docs/results.md).
#pragma once
#include <cublasLt.h>

namespace rlp::cuda {

// The entry points rlparity calls, resolved from the library's own handle (never interposed).
struct CublasLtApi {
  decltype(&::cublasLtGetVersion) GetVersion;
  decltype(&::cublasLtCreate) Create;
  decltype(&::cublasLtDestroy) Destroy;
  decltype(&::cublasLtMatmul) Matmul;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&::cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&::cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&::cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&::cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&::cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&::cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&::cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
};

// Loads libcublasLt.so.<major of the headers built against> on the first call (the loader's search
// path: LD_LIBRARY_PATH, this binary's RUNPATH, the system's; then the toolkit's library folder
// found at build time). Throws rlp::Error naming the library and the loader's message when it or
// one of the entry points is missing.
const CublasLtApi& cublaslt();

}  // namespace rlp::cuda
