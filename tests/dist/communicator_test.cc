// Collectives against closed-form results, one thread per rank, world sizes 1..5 and 8.
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <numeric>
#include <vector>

#include "dist_test_support.h"
#include "gradcomp/error.h"
#include "gradcomp/kernels/half.h"

namespace gradcomp::dist {
namespace {

using test::run_ranks;

const std::vector<int> kWorlds = {1, 2, 3, 4, 5, 8};
const std::vector<std::size_t> kSizes = {0, 1, 7, 1000};

// Rank r's value at i: small integers, so every sum is exact in fp32 and fp16.
float value(int r, std::size_t i) { return static_cast<float>((r + 1) * ((i % 13) + 1)) - 20.0f; }
float sum_of_values(int world, std::size_t i) {
  float s = 0;
  for (int r = 0; r < world; ++r) s += value(r, i);
  return s;
}

TEST(DistCommunicator, AllreduceSumMatchesClosedForm) {
  for (int world : kWorlds) {
    run_ranks(world, [&](Communicator& comm) {
      EXPECT_EQ(comm.world_size(), world);
      for (std::size_t n : kSizes) {
        std::vector<float> data(n);
        for (std::size_t i = 0; i < n; ++i) data[i] = value(comm.rank(), i);
        comm.allreduce_sum(data);
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_EQ(data[i], sum_of_values(world, i))
              << "world " << world << " n " << n << " i " << i;
        }
      }
    });
  }
}

// A world of one issues no allreduce (the sum of one buffer is itself) and counts no bytes.
TEST(DistCommunicator, AllreduceInAWorldOfOneIssuesNothing) {
  run_ranks(1, [&](Communicator& comm) {
    std::vector<float> f{1.5f, -2.0f, 3.0f};
    std::vector<std::uint16_t> h{kernels::float_to_fp16_ref(1.5f),
                                 kernels::float_to_fp16_ref(-2.0f)};
    const auto before = comm.counters();
    comm.allreduce_sum(f);
    comm.allreduce_sum_f16(h);
    const auto after = comm.counters();
    EXPECT_EQ(f, (std::vector<float>{1.5f, -2.0f, 3.0f}));
    EXPECT_EQ(kernels::fp16_to_float_ref(h[0]), 1.5f);
    EXPECT_EQ(kernels::fp16_to_float_ref(h[1]), -2.0f);
    EXPECT_EQ(after.operations, before.operations);
    EXPECT_EQ(after.bytes_sent, before.bytes_sent);
  });
}

// Answers the question whether c10d's Gloo sums at::kHalf on CPU: it does (gloo::float16).
TEST(DistCommunicator, AllreduceSumF16MatchesClosedForm) {
  for (int world : kWorlds) {
    run_ranks(world, [&](Communicator& comm) {
      for (std::size_t n : kSizes) {
        std::vector<std::uint16_t> data(n);
        for (std::size_t i = 0; i < n; ++i) {
          data[i] = kernels::float_to_fp16_ref(value(comm.rank(), i));
        }
        const auto before = comm.counters();
        comm.allreduce_sum_f16(data);
        const auto after = comm.counters();
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_EQ(kernels::fp16_to_float_ref(data[i]), sum_of_values(world, i))
              << "world " << world << " n " << n << " i " << i;
        }
        // Ring allreduce of 2n bytes: 2(W-1)/W of them each way.
        const std::uint64_t w = static_cast<std::uint64_t>(world);
        EXPECT_EQ(after.bytes_sent - before.bytes_sent, 2 * (w - 1) * (2 * n) / w);
      }
    });
  }
}

TEST(DistCommunicator, AllgatherBytesWithDifferingSizes) {
  // Per-rank sizes for each pattern: equal, varying with zeros, all zero.
  const std::vector<std::vector<std::size_t>> patterns = {
      {0}, {1}, {7}, {1000}, {0, 1, 7, 1000, 0, 3, 0, 5}, {5, 0, 0, 0, 0, 0, 0, 0}};
  for (int world : kWorlds) {
    run_ranks(world, [&](Communicator& comm) {
      std::vector<std::byte> all;
      std::vector<std::size_t> offsets;
      for (const auto& pattern : patterns) {
        auto size_of = [&](int r) { return pattern[static_cast<std::size_t>(r) % pattern.size()]; };
        auto byte_of = [](int r, std::size_t i) {
          return static_cast<std::byte>((r * 31 + i * 7) & 0xFF);
        };
        std::vector<std::byte> mine(size_of(comm.rank()));
        for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = byte_of(comm.rank(), i);
        const auto ops_before = comm.counters().operations;
        comm.allgather_bytes(mine, all, offsets);
        ASSERT_EQ(offsets.size(), static_cast<std::size_t>(world) + 1);
        std::size_t max_size = 0;
        for (int r = 0; r < world; ++r) {
          const std::size_t sz = size_of(r);
          max_size = std::max(max_size, sz);
          ASSERT_EQ(offsets[static_cast<std::size_t>(r) + 1] - offsets[static_cast<std::size_t>(r)],
                    sz);
          for (std::size_t i = 0; i < sz; ++i) {
            ASSERT_EQ(all[offsets[static_cast<std::size_t>(r)] + i], byte_of(r, i));
          }
        }
        ASSERT_EQ(all.size(), offsets.back());
        // The sizes always travel; the data only when some rank has bytes.
        EXPECT_EQ(comm.counters().operations - ops_before, max_size == 0 ? 1u : 2u);
      }
    });
  }
}

TEST(DistCommunicator, BroadcastAndBarrier) {
  for (int world : kWorlds) {
    run_ranks(world, [&](Communicator& comm) {
      for (std::size_t n : kSizes) {
        const int root = world - 1;
        std::vector<std::byte> data(n, static_cast<std::byte>(comm.rank()));
        comm.broadcast_bytes(data, root);
        for (std::byte b : data) ASSERT_EQ(b, static_cast<std::byte>(root));
      }
      comm.barrier();
      EXPECT_THROW(comm.broadcast_bytes({}, world), InvalidArgument);
    });
  }
}

TEST(DistCommunicator, RejectsBadRankAndTimeout) {
  const Store store = Store::in_process();
  EXPECT_THROW(Communicator(store, test::local_config(2, 2)), InvalidArgument);
  auto c = test::local_config(0, 1);
  c.timeout = std::chrono::milliseconds(0);
  EXPECT_THROW(Communicator(store, c), InvalidArgument);
}

// A rank that never shows up: the others fail the rendezvous with CommError.
TEST(DistCommunicator, MissingPeerTimesOutWithCommError) {
  const Store store = Store::in_process();
  auto c = test::local_config(0, 2);
  c.timeout = std::chrono::milliseconds(500);
  try {
    Communicator comm(store, c);
    FAIL() << "rendezvous without rank 1 succeeded";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("rendezvous"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradcomp::dist
