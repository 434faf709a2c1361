// tests: the instruction sets a kernel test can run on this CPU. A test that loops over ISAs
// takes them from here, so that each one the CPU lacks is named as skipped in the test's output
// instead of passing over it in silence (a green run on an AVX2-only machine then says that
// it tested no AVX-512 kernel).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"

namespace qs::testing_util {

// Prints why `what` was not run on this CPU, tagged with the running test's name. Not gtest's
// "[  SKIPPED ]", which ctest would read as the whole test skipped.
inline void note_isa_skip(const std::string& what) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::printf(
      "[ ISA SKIP ] %s: this CPU lacks %s, not tested\n",
      info != nullptr ? (std::string(info->test_suite_name()) + "." + info->name()).c_str() : "?",
      what.c_str());
}

// The members of `wanted` this CPU runs; each one it lacks is noted by name.
inline std::vector<kernels::Isa> runnable_isas(std::initializer_list<kernels::Isa> wanted) {
  std::vector<kernels::Isa> isas;
  for (kernels::Isa isa : wanted) {
    if (kernels::isa_supported(isa)) {
      isas.push_back(isa);
    } else {
      note_isa_skip(kernels::isa_name(isa));
    }
  }
  return isas;
}

}  // namespace qs::testing_util
