// tests/dist: the main() of a GoogleTest binary that runs under mpirun. Every rank runs every
// test (the tests call collectives, so all ranks must walk the same tests in the same order);
// rank 0 prints gtest's usual output, the others only their failures, marked with their rank.
// Any rank's failure makes that rank exit non-zero, and mpirun's exit status with it.
#pragma once

#include <cstdio>
#include <memory>

#include <gtest/gtest.h>

#include "dist/communicator.h"

namespace qs::testing {

inline std::shared_ptr<dist::Communicator>& mpi_world_slot() {
  static std::shared_ptr<dist::Communicator> world;
  return world;
}

// The world communicator (size 1 without mpirun), set up by main().
inline const std::shared_ptr<dist::Communicator>& mpi_world() {
  return mpi_world_slot();
}

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() != nullptr ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }

 private:
  int rank_;
};

}  // namespace qs::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto world = qs::dist::world();
  if (!world.ok()) {
    std::fprintf(stderr, "%s\n", world.status().to_string().c_str());
    return 1;
  }
  qs::testing::mpi_world_slot() = *world;
  const int rank = (*world)->rank();
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new qs::testing::RankFailurePrinter(rank));
  }
  return RUN_ALL_TESTS();
}
