// kernels/cpu: how a Highway source (*_hwy.cc) hands out its kernels for one target it names,
// not only for the CPU's best as HWY_DYNAMIC_DISPATCH does: the index of a target in
// HWY_EXPORT's tables, one entry of such a table, and the (target, kernels) table a source fills
// once. Tests and benchmarks run every target this way, without Highway's process-wide mock of
// the CPU. Included after <hwy/highway.h>, by the *_hwy.cc sources only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include <hwy/base.h>     // Num0BitsBelowLS1Bit_Nonzero64, HWY_IDE
#include <hwy/targets.h>  // HWY_CHOSEN_TARGET_SHIFT, HWY_TARGETS

#include "core/check.h"

// HWY_TARGETS depends on this opt-in (elementwise_hwy.cc says why it is on); every source
// must compile the same targets, which elementwise_hwy_targets() lists for the whole layer.
#ifndef HWY_WANT_AVX3_DL
#error "define HWY_WANT_AVX3_DL before the first Highway header, as elementwise_hwy.cc does"
#endif

namespace qs::kernels::cpu {

// Where HWY_EXPORT's tables hold `target` (one Highway target bit): the index
// HWY_DYNAMIC_DISPATCH reads from hwy::GetChosenTarget() (targets.h), taken for that target
// instead of the CPU's best. A source compiled for one target alone (aarch64, whose SVE targets
// CMakeLists.txt leaves out) has tables of that one entry (highway.h's HWY_EXPORT), under the
// same condition as here; the full tables' index would read past them. A target the source is
// not compiled for gives an entry all the same (the last, scalar, one when the bit is past the
// dynamic targets), so callers check it against HWY_TARGETS.
inline size_t hwy_table_index(int64_t target) {
#if HWY_IDE || ((HWY_TARGETS & (HWY_TARGETS - 1)) == 0)
  static_cast<void>(target);
  return 0;
#else
  const int64_t shifted = HWY_CHOSEN_TARGET_SHIFT(target);
  const int64_t mask = shifted != 0 ? shifted : HWY_CHOSEN_TARGET_MASK_SCALAR;
  return hwy::Num0BitsBelowLS1Bit_Nonzero64(static_cast<uint64_t>(mask));
#endif
}

// The entry for `target` of HWY_DISPATCH_TABLE(name); fails with `message` when the source is
// not compiled for `target`.
template <class Fn>
Fn hwy_table_entry(const Fn* table, int64_t target, const char* message) {
  const Fn fn = table[hwy_table_index(target)];
  QS_CHECK_MSG((HWY_TARGETS & target) != 0 && fn != nullptr, message);
  return fn;
}

// A source's kernels for each target it is compiled for, best first.
template <class Kernels>
using HwyKernelTable = std::vector<std::pair<int64_t, Kernels>>;

// kernels_of(target) for every target of HWY_TARGETS. Meant for a function-local static, built
// on the first call (thread-safe), so that kernels_of checks its entries once.
template <class KernelsOf>
auto make_hwy_kernel_table(KernelsOf kernels_of) {
  HwyKernelTable<decltype(kernels_of(int64_t{}))> table;
  for (int64_t rest = HWY_TARGETS; rest != 0; rest &= rest - 1) {
    const int64_t target = rest & -rest;
    table.emplace_back(target, kernels_of(target));
  }
  return table;
}

// The kernels `table` holds for `target`; fails with `message` for a target it lacks.
template <class Kernels>
const Kernels& hwy_kernels(const HwyKernelTable<Kernels>& table, int64_t target,
                           const char* message) {
  for (const auto& [t, k] : table) {
    if (t == target) return k;
  }
  QS_CHECK_MSG(false, message);
  return table.front().second;
}

}  // namespace qs::kernels::cpu
