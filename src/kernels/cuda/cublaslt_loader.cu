// kernels/cuda: cublaslt_loader.h. Host code only; a .cu so that it builds with the other
// CUDA sources (QS_CUDA), where cuBLASLt's headers are.
#include <dlfcn.h>

#include <string>
#include <utility>

#include "kernels/cuda/cublaslt_loader.h"

namespace qs::kernels::cuda {
namespace {

// The soname of the cuBLASLt these headers describe: a library of another major version may
// have other structures and enum values behind the same names.
std::string soname() {
  return "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
}

CudaStatus not_loaded(std::string why) {
  return {static_cast<int>(CUBLAS_STATUS_NOT_INITIALIZED), std::move(why)};
}

// `fn` from `lib`, or why not in *missing (dlerror() names the file and the symbol).
template <typename Fn>
bool resolve(void* lib, const std::string& file, const char* name, Fn* fn, std::string* missing) {
  dlerror();  // a null symbol is told from a missing one by dlerror() alone
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*fn != nullptr) return true;
  const char* err = dlerror();
  *missing = err != nullptr ? err : file + ": " + name + " is null";
  return false;
}

// Every function of the table from `lib`, or the first missing one.
bool resolve_all(void* lib, const std::string& file, CublasLtApi* api, std::string* missing) {
#define QS_RESOLVE(fn) resolve(lib, file, #fn, &api->fn, missing)
  return QS_RESOLVE(cublasLtGetVersion) && QS_RESOLVE(cublasLtGetStatusName) &&
         QS_RESOLVE(cublasLtGetStatusString) && QS_RESOLVE(cublasLtCreate) &&
         QS_RESOLVE(cublasLtDestroy) && QS_RESOLVE(cublasLtMatmulDescCreate) &&
         QS_RESOLVE(cublasLtMatmulDescDestroy) && QS_RESOLVE(cublasLtMatmulDescSetAttribute) &&
         QS_RESOLVE(cublasLtMatrixLayoutCreate) && QS_RESOLVE(cublasLtMatrixLayoutDestroy) &&
         QS_RESOLVE(cublasLtMatmulPreferenceCreate) &&
         QS_RESOLVE(cublasLtMatmulPreferenceDestroy) &&
         QS_RESOLVE(cublasLtMatmulPreferenceSetAttribute) &&
         QS_RESOLVE(cublasLtMatmulAlgoGetHeuristic) && QS_RESOLVE(cublasLtMatmul);
#undef QS_RESOLVE
}

struct Loaded {
  CublasLtApi api;
  CudaStatus status;
};

}  // namespace

CudaStatus CublasLtApi::check(cublasStatus_t s, const char* call) const {
  if (s == CUBLAS_STATUS_SUCCESS) return {};
  return {static_cast<int>(s),
          std::string(call) + ": " + cublasLtGetStatusName(s) + ": " + cublasLtGetStatusString(s)};
}

CudaStatus load_cublaslt(std::span<const std::string> candidates, CublasLtApi* api) {
  std::string tried;
  for (const std::string& name : candidates) {
    if (!tried.empty()) tried += "; ";
    // RTLD_LOCAL: cuBLASLt's symbols stay out of the global namespace, where they could
    // satisfy another library's lookups.
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      tried += err != nullptr ? err : name + ": dlopen failed";
      continue;
    }
    CublasLtApi found;
    std::string missing;
    if (!resolve_all(lib, name, &found, &missing)) {
      tried += missing;
      dlclose(lib);
      continue;
    }
    // cublasLtGetVersion() is major * 10000 + minor * 100 + patch, as CUBLAS_VERSION.
    const size_t version = found.cublasLtGetVersion();
    if (version / 10000 != CUBLAS_VER_MAJOR) {
      tried += name + ": cuBLASLt " + std::to_string(version / 10000) + "." +
               std::to_string(version / 100 % 100) + ", not the " +
               std::to_string(CUBLAS_VER_MAJOR) + ".x this build was compiled against";
      dlclose(lib);
      continue;
    }
    *api = found;
    return {};
  }
  return not_loaded("cuBLASLt (" + soname() +
                    ") cannot be loaded: " + (tried.empty() ? "no library named" : tried) +
                    " (install the CUDA " + std::to_string(CUBLAS_VER_MAJOR) +
                    " toolkit's cuBLAS, or put its library directory on LD_LIBRARY_PATH)");
}

CudaStatus cublaslt_api(const CublasLtApi** api) {
  static const Loaded loaded = [] {
    // The toolkit's directory stands in for the run path a linked cuBLASLt gave the binary,
    // where the system's library search does not cover it.
    const std::string candidates[] = {soname(), std::string(QS_CUDA_LIBRARY_DIR) + "/" + soname(),
                                      "libcublasLt.so"};
    Loaded l;
    l.status = load_cublaslt(candidates, &l.api);
    return l;
  }();
  if (loaded.status.ok()) *api = &loaded.api;
  return loaded.status;
}

}  // namespace qs::kernels::cuda
