// tests: the named tensors of a reference file that a generator script in scripts/golden/
// wrote (reference.safetensors: what transformers or diffusers computed), mapped for the
// test's lifetime. A fixture that does not read is a broken checkout: it aborts with the file.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/mmap_file.h"
#include "io/checkpoint.h"

namespace qs::testing {

class ReferenceTensors {
 public:
  explicit ReferenceTensors(const std::filesystem::path& file) {
    auto mapped = MappedFile::open(file.string());
    QS_CHECK_MSG(mapped.ok(), mapped.status().to_string().c_str());
    file_ = *mapped;
    std::vector<std::pair<std::string, Tensor>> tensors;
    const Status s = io::read_safetensors(file_, &tensors, nullptr);
    QS_CHECK_MSG(s.ok(), s.to_string().c_str());
    for (auto& [name, t] : tensors) tensors_[name] = t;
  }
  const Tensor& at(const std::string& name) const {
    auto it = tensors_.find(name);
    QS_CHECK_MSG(it != tensors_.end(), name.c_str());
    return it->second;
  }
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  std::vector<float> f32(const std::string& name) const { return at(name).to_f32(); }
  std::vector<int32_t> i32(const std::string& name) const {
    const Tensor& t = at(name);
    return std::vector<int32_t>(t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel());
  }

 private:
  std::shared_ptr<MappedFile> file_;
  std::map<std::string, Tensor> tensors_;
};

// Elements of `got` off `want` by more than 1e-4 * max(1, |want|): the text families'
// tolerance (hf_logits_test.cc), relative for ordinary values, absolute near zero.
inline int64_t count_off(const float* got, const float* want, size_t n) {
  int64_t off = 0;
  for (size_t i = 0; i < n; ++i) {
    off += std::fabs(got[i] - want[i]) > 1e-4f * std::max(1.0f, std::fabs(want[i]));
  }
  return off;
}

}  // namespace qs::testing
