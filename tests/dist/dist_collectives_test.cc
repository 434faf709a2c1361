// tests/dist: every collective of dist::Communicator against a reference each rank computes
// alone (inputs are a function of (rank, i), so every rank knows every rank's input), run under
// `mpirun -np 1`, `-np 2` and `-np 4` and without mpirun; also the single-process
// implementation. All-reduce results must be the same bits on every rank. Each collective runs
// twice: blocking (no timeout) and non-blocking under a deadline. main() is mpi_test_main.h's.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "dist/communicator.h"
#include "mpi_test_main.h"

namespace qs::dist {
namespace {

Communicator* world_comm() {
  return qs::testing::mpi_world().get();
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Multiples of 1/8 up to 12.5: exact in f32 and bf16, and so is any sum of a few of them, in
// any order.
float exact_input(int rank, int64_t i) {
  return static_cast<float>(
             static_cast<int>(
                 mix(static_cast<uint64_t>(rank) * 1000003u + static_cast<uint64_t>(i)) % 201) -
             100) /
         8.0f;
}

// Mantissas and exponents spread over 2^-12 .. 2^12, where the order of a sum shows in its low
// bits.
float varied_input(int rank, int64_t i) {
  const uint64_t h = mix((static_cast<uint64_t>(rank) << 40) ^ static_cast<uint64_t>(i));
  const float m = static_cast<float>(static_cast<int64_t>(h % 20001) - 10000) / 10000.0f;
  return std::ldexp(m, static_cast<int>((h >> 32) % 25) - 12);
}

// Each rank holds the same bytes.
::testing::AssertionResult same_on_every_rank(Communicator* comm, const void* data, size_t bytes) {
  if (bytes == 0) return ::testing::AssertionSuccess();
  std::vector<uint8_t> all(bytes * static_cast<size_t>(comm->size()));
  Status st = comm->all_gather(data, bytes, all.data());
  if (!st.ok()) return ::testing::AssertionFailure() << st.to_string();
  for (int r = 0; r < comm->size(); ++r) {
    if (std::memcmp(all.data() + bytes * static_cast<size_t>(r), data, bytes) != 0) {
      return ::testing::AssertionFailure()
             << "rank " << r << " holds other bytes than rank " << comm->rank();
    }
  }
  return ::testing::AssertionSuccess();
}

// Runs `body` with the communicator blocking (no timeout) and then under a deadline, which
// takes the non-blocking forms; restores the timeout after.
template <typename Body>
void in_both_modes(Communicator* comm, Body body) {
  const double saved = comm->timeout();
  for (double timeout : {0.0, 60.0}) {
    SCOPED_TRACE("timeout " + std::to_string(timeout) + " s");
    comm->set_timeout(timeout);
    body();
  }
  comm->set_timeout(saved);
}

const std::vector<int64_t> kCounts = {1, 2, 3, 7, 1000, 1001, 12345, 1 << 20, (1 << 20) + 3};

void check_all_reduce_f32(Communicator* comm, const std::vector<int>& ranks_of_world) {
  // ranks_of_world[r]: the world rank of this communicator's rank r (its inputs).
  const int me = ranks_of_world[static_cast<size_t>(comm->rank())];
  for (int64_t n : kCounts) {
    SCOPED_TRACE("n = " + std::to_string(n));
    std::vector<float> exact(static_cast<size_t>(n)), varied(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      exact[static_cast<size_t>(i)] = exact_input(me, i);
      varied[static_cast<size_t>(i)] = varied_input(me, i);
    }
    ASSERT_TRUE(comm->all_reduce_sum(exact.data(), n).ok());
    ASSERT_TRUE(comm->all_reduce_sum(varied.data(), n).ok());
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      float want_exact = 0;
      double want = 0, sum_abs = 0;
      for (int w : ranks_of_world) {
        want_exact += exact_input(w, i);
        want += varied_input(w, i);
        sum_abs += std::fabs(varied_input(w, i));
      }
      const double tol = 4.0 * std::ldexp(1.0, -23) * sum_abs;
      const auto u = static_cast<size_t>(i);
      if (exact[u] != want_exact || std::fabs(varied[u] - want) > tol) {
        if (++bad <= 3) {
          ADD_FAILURE() << "i = " << i << ": exact " << exact[u] << " want " << want_exact
                        << ", varied " << varied[u] << " want " << want << " +- " << tol;
        }
      }
    }
    EXPECT_EQ(bad, 0);
    EXPECT_TRUE(same_on_every_rank(comm, varied.data(), varied.size() * sizeof(float)));
  }
}

void check_all_reduce_bf16(Communicator* comm, const std::vector<int>& ranks_of_world) {
  const int me = ranks_of_world[static_cast<size_t>(comm->rank())];
  for (int64_t n : kCounts) {
    SCOPED_TRACE("n = " + std::to_string(n));
    std::vector<uint16_t> exact(static_cast<size_t>(n)), varied(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      exact[static_cast<size_t>(i)] = f32_to_bf16(exact_input(me, i));
      varied[static_cast<size_t>(i)] = f32_to_bf16(varied_input(me, i));
    }
    ASSERT_TRUE(comm->all_reduce_sum_bf16(exact.data(), n).ok());
    ASSERT_TRUE(comm->all_reduce_sum_bf16(varied.data(), n).ok());
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      float exact_sum = 0;
      double want = 0, sum_abs = 0;
      for (int w : ranks_of_world) {
        exact_sum += bf16_to_f32(f32_to_bf16(exact_input(w, i)));
        const double x = bf16_to_f32(f32_to_bf16(varied_input(w, i)));
        want += x;
        sum_abs += std::fabs(x);
      }
      // Summed in f32 (exact here), rounded to bf16 once.
      const uint16_t want_exact = f32_to_bf16(exact_sum);
      const double tol = std::ldexp(std::fabs(want), -8) + 4.0 * std::ldexp(1.0, -23) * sum_abs;
      const auto u = static_cast<size_t>(i);
      const double got = bf16_to_f32(varied[u]);
      if (exact[u] != want_exact || std::fabs(got - want) > tol) {
        if (++bad <= 3) {
          ADD_FAILURE() << "i = " << i << ": exact " << bf16_to_f32(exact[u]) << " want "
                        << bf16_to_f32(want_exact) << ", varied " << got << " want " << want
                        << " +- " << tol;
        }
      }
    }
    EXPECT_EQ(bad, 0);
    EXPECT_TRUE(same_on_every_rank(comm, varied.data(), varied.size() * sizeof(uint16_t)));
  }
}

std::vector<int> identity_ranks(int size) {
  std::vector<int> r(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) r[static_cast<size_t>(i)] = i;
  return r;
}

uint8_t byte_of(int rank, size_t i) {
  return static_cast<uint8_t>(mix(static_cast<uint64_t>(rank) * 7919u + i));
}

TEST(SingleProcess, EveryCollectiveIsACopyOrNothing) {
  std::unique_ptr<Communicator> one = single_process();
  EXPECT_EQ(one->rank(), 0);
  EXPECT_EQ(one->size(), 1);
  EXPECT_EQ(one->describe(), "single process");
  EXPECT_TRUE(one->health().ok());

  std::vector<float> f = {1.5f, -2.0f, 3.25f};
  ASSERT_TRUE(one->all_reduce_sum(f.data(), 3).ok());
  EXPECT_EQ(f, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  std::vector<uint16_t> h = {f32_to_bf16(1.5f), f32_to_bf16(-7.0f)};
  const std::vector<uint16_t> h_before = h;
  ASSERT_TRUE(one->all_reduce_sum_bf16(h.data(), 2).ok());
  EXPECT_EQ(h, h_before);
  EXPECT_EQ(one->all_reduce_sum(f.data(), -1).code(), StatusCode::kInvalidArgument);

  const char send[5] = "abcd";
  char recv[5] = {};
  ASSERT_TRUE(one->all_gather(send, 5, recv).ok());
  EXPECT_STREQ(recv, "abcd");

  int x = 42;
  EXPECT_TRUE(one->broadcast(&x, sizeof(x), 0).ok());
  EXPECT_TRUE(one->wait_broadcast(&x, sizeof(x), 0, 0.1).ok());
  EXPECT_EQ(x, 42);
  EXPECT_EQ(one->broadcast(&x, sizeof(x), 1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(one->barrier().ok());

  std::vector<uint8_t> bytes = {1, 2, 3};
  ASSERT_TRUE(one->broadcast_bytes(&bytes, 0).ok());
  EXPECT_EQ(bytes, (std::vector<uint8_t>{1, 2, 3}));
  ASSERT_TRUE(one->wait_broadcast_bytes(&bytes, 0, 0).ok());
  EXPECT_EQ(bytes.size(), 3u);

  auto sub = one->split(3, 0);
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ((*sub)->size(), 1);
  EXPECT_EQ((*sub)->rank(), 0);
  EXPECT_FALSE(one->split(-1, 0).ok());
  EXPECT_TRUE(one->health().ok());
}

TEST(World, MatchesHowTheProcessWasStarted) {
  EXPECT_EQ(launched_by_mpi(), std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr);
  const char* size_env = std::getenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(world_comm()->size(), size_env != nullptr ? std::atoi(size_env) : 1);
  const std::string d = world_comm()->describe();
  if (launched_by_mpi() && mpi_available()) {
    EXPECT_EQ(d.rfind("MPI (", 0), 0u) << d;
    EXPECT_NE(d.find(std::to_string(world_comm()->size()) +
                     (world_comm()->size() == 1 ? " rank" : " ranks")),
              std::string::npos)
        << d;
  } else {
    EXPECT_EQ(d, "single process");
  }
  // The same object every time.
  auto again = world();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), world_comm());
  EXPECT_TRUE(world_comm()->health().ok());
}

TEST(Collectives, AllReduceSumF32) {
  in_both_modes(world_comm(),
                [] { check_all_reduce_f32(world_comm(), identity_ranks(world_comm()->size())); });
}

TEST(Collectives, AllReduceSumBf16) {
  in_both_modes(world_comm(),
                [] { check_all_reduce_bf16(world_comm(), identity_ranks(world_comm()->size())); });
}

TEST(Collectives, AllReduceZeroCountAndBadCount) {
  in_both_modes(world_comm(), [] {
    EXPECT_TRUE(world_comm()->all_reduce_sum(nullptr, 0).ok());
    EXPECT_TRUE(world_comm()->all_reduce_sum_bf16(nullptr, 0).ok());
    float x = 1;
    EXPECT_EQ(world_comm()->all_reduce_sum(&x, -2).code(), StatusCode::kInvalidArgument);
    // A refused call breaks nothing.
    EXPECT_TRUE(world_comm()->health().ok());
  });
}

TEST(Collectives, AllGather) {
  Communicator* comm = world_comm();
  in_both_modes(comm, [comm] {
    for (size_t bytes : {size_t{1}, size_t{13}, size_t{4096}, size_t{1} << 20}) {
      SCOPED_TRACE("bytes = " + std::to_string(bytes));
      std::vector<uint8_t> send(bytes);
      for (size_t i = 0; i < bytes; ++i) send[i] = byte_of(comm->rank(), i);
      std::vector<uint8_t> recv(bytes * static_cast<size_t>(comm->size()), 0xee);
      ASSERT_TRUE(comm->all_gather(send.data(), bytes, recv.data()).ok());
      for (int r = 0; r < comm->size(); ++r) {
        size_t bad = 0;
        for (size_t i = 0; i < bytes; ++i)
          bad += recv[static_cast<size_t>(r) * bytes + i] != byte_of(r, i);
        EXPECT_EQ(bad, 0u) << "from rank " << r;
      }
    }
  });
}

TEST(Collectives, BroadcastFromEachRoot) {
  Communicator* comm = world_comm();
  in_both_modes(comm, [comm] {
    for (int root = 0; root < comm->size(); ++root) {
      for (size_t bytes : {size_t{0}, size_t{1}, size_t{1000}, size_t{3} << 20}) {
        SCOPED_TRACE("root " + std::to_string(root) + ", bytes " + std::to_string(bytes));
        std::vector<uint8_t> data(bytes);
        for (size_t i = 0; i < bytes; ++i) data[i] = byte_of(comm->rank() + 100, i);
        ASSERT_TRUE(comm->broadcast(data.data(), bytes, root).ok());
        size_t bad = 0;
        for (size_t i = 0; i < bytes; ++i) bad += data[i] != byte_of(root + 100, i);
        EXPECT_EQ(bad, 0u);
        // The same through the idle wait, with and without its own limit.
        for (size_t i = 0; i < bytes; ++i) data[i] = byte_of(comm->rank() + 200, i);
        ASSERT_TRUE(comm->wait_broadcast(data.data(), bytes, root, root % 2 ? 0.0 : 60.0).ok());
        bad = 0;
        for (size_t i = 0; i < bytes; ++i) bad += data[i] != byte_of(root + 200, i);
        EXPECT_EQ(bad, 0u);
      }
    }
    int x = 0;
    EXPECT_EQ(comm->broadcast(&x, sizeof(x), comm->size()).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(comm->broadcast(&x, sizeof(x), -1).code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(comm->health().ok());
  });
}

TEST(Collectives, BroadcastBytesOfEveryLength) {
  Communicator* comm = world_comm();
  in_both_modes(comm, [comm] {
    for (int root = 0; root < comm->size(); ++root) {
      for (size_t len : {size_t{0}, size_t{1}, size_t{17}, size_t{65536}, size_t{0}}) {
        SCOPED_TRACE("root " + std::to_string(root) + ", length " + std::to_string(len));
        std::vector<uint8_t> want(len);
        for (size_t i = 0; i < len; ++i) want[i] = byte_of(root + 300, i);
        // Non-roots start with something else, longer or shorter.
        std::vector<uint8_t> got = comm->rank() == root ? want : std::vector<uint8_t>(5, 9);
        ASSERT_TRUE(comm->broadcast_bytes(&got, root).ok());
        EXPECT_EQ(got, want);
        got = comm->rank() == root ? want : std::vector<uint8_t>(100000, 1);
        ASSERT_TRUE(comm->wait_broadcast_bytes(&got, root, 60).ok());
        EXPECT_EQ(got, want);
      }
    }
  });
}

TEST(Collectives, BarrierWaitsForTheLastRank) {
  Communicator* comm = world_comm();
  in_both_modes(comm, [comm] {
    ASSERT_TRUE(comm->barrier().ok());
    const auto start = Clock::now();
    // Rank r arrives r * 50 ms late: nobody leaves before the last one came.
    std::this_thread::sleep_for(std::chrono::milliseconds(50 * comm->rank()));
    ASSERT_TRUE(comm->barrier().ok());
    EXPECT_GE(seconds_since(start), 0.05 * (comm->size() - 1) - 0.005);
  });
}

TEST(Split, ReversedKeysReverseTheRanks) {
  Communicator* comm = world_comm();
  in_both_modes(comm, [comm] {
    auto sub = comm->split(7, -comm->rank());
    ASSERT_TRUE(sub.ok()) << sub.status().to_string();
    Communicator* s = sub->get();
    EXPECT_EQ(s->size(), comm->size());
    EXPECT_EQ(s->rank(), comm->size() - 1 - comm->rank());
    EXPECT_EQ(s->timeout(), comm->timeout());
    std::vector<int> world_of(static_cast<size_t>(s->size()));
    for (int r = 0; r < s->size(); ++r) world_of[static_cast<size_t>(r)] = s->size() - 1 - r;
    check_all_reduce_f32(s, world_of);
  });
}

TEST(Split, GridOfRowsAndColumns) {
  Communicator* comm = world_comm();
  if (comm->size() != 4) GTEST_SKIP() << "the 2 x 2 grid needs 4 ranks";
  in_both_modes(comm, [comm] {
    const int row = comm->rank() / 2, col = comm->rank() % 2;
    auto rows = comm->split(row, col);
    auto cols = comm->split(col, row);
    ASSERT_TRUE(rows.ok() && cols.ok());
    Communicator* r = rows->get();
    Communicator* c = cols->get();
    EXPECT_EQ(r->size(), 2);
    EXPECT_EQ(r->rank(), col);
    EXPECT_EQ(c->size(), 2);
    EXPECT_EQ(c->rank(), row);
    EXPECT_NE(r->describe().find("2 ranks on 1 host"), std::string::npos) << r->describe();
    check_all_reduce_f32(r, {2 * row, 2 * row + 1});
    check_all_reduce_bf16(c, {col, 2 + col});

    // A broadcast inside each column from its second rank, and a gather inside each row.
    int x = comm->rank() * 10;
    ASSERT_TRUE(c->broadcast(&x, sizeof(x), 1).ok());
    EXPECT_EQ(x, (2 + col) * 10);
    int both[2] = {};
    const int mine = comm->rank();
    ASSERT_TRUE(r->all_gather(&mine, sizeof(mine), both).ok());
    EXPECT_EQ(both[0], 2 * row);
    EXPECT_EQ(both[1], 2 * row + 1);
    EXPECT_TRUE(r->barrier().ok());
  });
}

TEST(Split, OneRankGroups) {
  Communicator* comm = world_comm();
  auto sub = comm->split(comm->rank(), 0);
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ((*sub)->size(), 1);
  check_all_reduce_f32(sub->get(), {comm->rank()});
  EXPECT_FALSE(comm->split(-1, 0).ok());
}

// Rank 1 is 2 s late to a broadcast it roots; rank 0 gives up after 0.5 s.
TEST(Timeout, ALateRankBreaksTheCommunicatorOfTheRankThatGaveUp) {
  if (world_comm()->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto dup = world_comm()->split(0, world_comm()->rank());
  ASSERT_TRUE(dup.ok());
  Communicator* comm = dup->get();
  const int rank = comm->rank();
  comm->set_timeout(rank == 0 ? 0.5 : 30.0);
  std::vector<uint8_t> data(4096, 0xab);
  if (rank == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    for (size_t i = 0; i < data.size(); ++i) data[i] = byte_of(1, i);
  }
  const auto start = Clock::now();
  Status st = comm->broadcast(data.data(), data.size(), 1);
  const double waited = seconds_since(start);
  if (rank == 0) {
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
    EXPECT_NE(st.message().find("rank 0 of " + std::to_string(comm->size())), std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find("within 0.5 s"), std::string::npos) << st.message();
    EXPECT_GE(waited, 0.5);
    EXPECT_LT(waited, 1.0);
    EXPECT_EQ(comm->health().message(), st.message());
    // Broken: every later call fails at once, with the same error.
    const auto later = Clock::now();
    Status again = comm->barrier();
    EXPECT_EQ(again.code(), StatusCode::kUnavailable);
    EXPECT_EQ(again.message(), st.message());
    float f = 1;
    EXPECT_FALSE(comm->all_reduce_sum(&f, 1).ok());
    EXPECT_FALSE(comm->split(0, 0).ok());
    EXPECT_LT(seconds_since(later), 0.05);
  } else {
    EXPECT_TRUE(st.ok()) << st.to_string();
    size_t bad = 0;
    for (size_t i = 0; i < data.size(); ++i) bad += data[i] != byte_of(1, i);
    EXPECT_EQ(bad, 0u);
    EXPECT_TRUE(comm->health().ok());
  }
  // Rank 0's request is still posted: the world barrier keeps MPI progressing on rank 0 until
  // rank 1's late broadcast has gone through, then every rank goes on together.
  ASSERT_TRUE(world_comm()->barrier().ok());
  EXPECT_TRUE(world_comm()->health().ok());
  if (rank == 0) {
    // What arrived late went into the communicator's own buffer, never into the caller's.
    EXPECT_EQ(data, std::vector<uint8_t>(4096, 0xab));
  }
}

TEST(WaitBroadcast, AnIdleWaitLeavesTheCoreAlone) {
  Communicator* comm = world_comm();
  if (comm->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  int step = 0;
  if (comm->rank() == 0) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    step = 17;
    ASSERT_TRUE(comm->wait_broadcast(&step, sizeof(step), 0, 0).ok());
    return;
  }
  rusage before{}, after{};
  getrusage(RUSAGE_THREAD, &before);
  const auto start = Clock::now();
  ASSERT_TRUE(comm->wait_broadcast(&step, sizeof(step), 0, 0).ok());
  const double wall = seconds_since(start);
  getrusage(RUSAGE_THREAD, &after);
  auto cpu = [](const rusage& u) {
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  };
  EXPECT_EQ(step, 17);
  EXPECT_GT(wall, 0.8);
  EXPECT_LT(cpu(after) - cpu(before), 0.25 * wall) << "CPU seconds over " << wall << " s";
}

}  // namespace
}  // namespace qs::dist
