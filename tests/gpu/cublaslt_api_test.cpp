// cuBLASLt is loaded on first use, not linked (kernels/cublaslt_api.hpp). Loading it and asking its
// version need no GPU, so this runs wherever the CUDA backend is built: the library found must be
// the major version of the headers, with every entry point rlparity calls.
#include <gtest/gtest.h>

#if RLPARITY_HAVE_CUDA
#include "cublaslt_api.hpp"
#endif

namespace {

TEST(CublasLtApi, LoadsTheLibraryOfTheHeaders) {
#if RLPARITY_HAVE_CUDA
  const rlp::cuda::CublasLtApi& lt = rlp::cuda::cublaslt();
  EXPECT_EQ(lt.GetVersion() / 10000, static_cast<size_t>(CUBLAS_VER_MAJOR));
  for (const void* fn :
       {reinterpret_cast<const void*>(lt.Create), reinterpret_cast<const void*>(lt.Destroy),
        reinterpret_cast<const void*>(lt.Matmul), reinterpret_cast<const void*>(lt.MatmulAlgoGetHeuristic),
        reinterpret_cast<const void*>(lt.MatmulDescCreate),
        reinterpret_cast<const void*>(lt.MatmulDescDestroy),
        reinterpret_cast<const void*>(lt.MatmulDescSetAttribute),
        reinterpret_cast<const void*>(lt.MatmulPreferenceCreate),
        reinterpret_cast<const void*>(lt.MatmulPreferenceDestroy),
        reinterpret_cast<const void*>(lt.MatmulPreferenceSetAttribute),
        reinterpret_cast<const void*>(lt.MatrixLayoutCreate),
        reinterpret_cast<const void*>(lt.MatrixLayoutDestroy)})
    EXPECT_NE(fn, nullptr);
  EXPECT_EQ(&lt, &rlp::cuda::cublaslt());  // loaded once
#else
  GTEST_SKIP() << "built without the CUDA toolkit (kernels/ not compiled)";
#endif
}

}  // namespace
