#include "cublaslt_api.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>
#include <string>

#include "rlparity/util/error.hpp"

namespace rlp::cuda {
namespace {

const std::string kSoname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);

void* open_library() {
  std::string why;
  for (const std::string& name : {kSoname, std::string(RLPARITY_CUDA_LIBRARY_DIR) + "/" + kSoname}) {
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    const char* e = dlerror();
    why += "\n  " + name + ": " + (e ? e : "not found");
  }
  RLP_THROW(
      "--backend cuda needs cuBLASLt ({}, the CUDA Toolkit's library) and cannot load it:{}\n"
      "put its folder in LD_LIBRARY_PATH",
      kSoname, why);
}

template <class F>
void resolve(void* lib, F& slot, const char* name) {
  slot = reinterpret_cast<F>(dlsym(lib, name));
  if (!slot)
    RLP_THROW("{} has no entry point {}: a cuBLASLt older than the headers rlparity was built with ({})",
              kSoname, name, CUBLAS_VERSION);
}

CublasLtApi load() {
  void* lib = open_library();  // kept open until exit: handles and descriptors may outlive any owner
  CublasLtApi a{};
#define RLP_RESOLVE(fn) resolve(lib, a.fn, "cublasLt" #fn)
  RLP_RESOLVE(GetVersion);
  RLP_RESOLVE(Create);
  RLP_RESOLVE(Destroy);
  RLP_RESOLVE(Matmul);
  RLP_RESOLVE(MatmulAlgoGetHeuristic);
  RLP_RESOLVE(MatmulDescCreate);
  RLP_RESOLVE(MatmulDescDestroy);
  RLP_RESOLVE(MatmulDescSetAttribute);
  RLP_RESOLVE(MatmulPreferenceCreate);
  RLP_RESOLVE(MatmulPreferenceDestroy);
  RLP_RESOLVE(MatmulPreferenceSetAttribute);
  RLP_RESOLVE(MatrixLayoutCreate);
  RLP_RESOLVE(MatrixLayoutDestroy);
#undef RLP_RESOLVE
  return a;
}

}  // namespace

const CublasLtApi& cublaslt() {
  // A failed load throws from call_once, which lets the next call try again.
  static std::once_flag once;
  static CublasLtApi api;
  std::call_once(once, [] { api = load(); });
  return api;
}

}  // namespace rlp::cuda
