// formats: names and one-line descriptions of quantization schemes (quant_scheme.h). These
// strings reach logs, `inspect` and error messages, so they spell the scheme the way the
// checkpoint's config would: layout, code type and width, grouping, symmetry, quirks.
#include "formats/quant_scheme.h"

namespace qs::formats {

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::kDense:
      return "dense";
    case Layout::kGptq:
      return "gptq";
    case Layout::kAwq:
      return "awq";
    case Layout::kCtPacked:
      return "ct-pack";
    case Layout::kCtInt:
      return "ct-int";
    case Layout::kFp8:
      return "fp8";
  }
  return "unknown";
}

namespace {

std::string grouping(int64_t group_size) {
  if (group_size > 0) return "g" + std::to_string(group_size);
  return group_size == 0 ? "per-tensor" : "per-channel";
}

}  // namespace

std::string ActScheme::describe() const {
  if (type == ActType::kNone) return "none";
  std::string s = type == ActType::kInt8 ? "int8" : "fp8";
  s += dynamic ? " dynamic" : " static";
  switch (strategy) {
    case ActStrategy::kToken:
      s += " per-token";
      break;
    case ActStrategy::kTensor:
      s += " per-tensor";
      break;
    case ActStrategy::kGroup:
      s += " g" + std::to_string(group_size);
      break;
  }
  if (type == ActType::kInt8) s += sym ? " sym" : " asym";
  return s;
}

bool operator==(const ActScheme& a, const ActScheme& b) {
  return a.type == b.type && a.strategy == b.strategy && a.dynamic == b.dynamic && a.sym == b.sym &&
         a.group_size == b.group_size;
}

std::string QuantScheme::describe() const {
  if (layout == Layout::kDense) return "dense";
  std::string s;
  if (layout == Layout::kFp8) {
    s = block_n > 0 && block_k > 0
            ? "fp8 e4m3 block " + std::to_string(block_n) + "x" + std::to_string(block_k)
            : "fp8 e4m3 " + grouping(group_size);
  } else {
    s = std::string(layout_name(layout)) + " int" + std::to_string(bits) + " " +
        grouping(group_size) + (sym ? " sym" : " asym");
    if (zero_minus_one) s += " zero-1";
    if (desc_act) s += " act-order";
  }
  if (act.quantized()) s += "; activations " + act.describe();
  return s;
}

bool operator==(const QuantScheme& a, const QuantScheme& b) {
  return a.layout == b.layout && a.bits == b.bits && a.group_size == b.group_size &&
         a.sym == b.sym && a.zero_minus_one == b.zero_minus_one && a.desc_act == b.desc_act &&
         a.block_n == b.block_n && a.block_k == b.block_k && a.act == b.act;
}

}  // namespace qs::formats
