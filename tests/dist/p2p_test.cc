// Point-to-point messages over the communicator (what the parameter server runs on):
// tagged send/recv in order, receive from any rank, exact byte counters, timeouts that
// name the peer. One thread per rank, real Gloo pairs over 127.0.0.1.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "dist_test_support.h"
#include "gradcomp/error.h"

namespace gradcomp::dist {
namespace {

using test::run_ranks;

std::vector<std::byte> pattern(int from, int to, int tag, std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = static_cast<std::byte>((from * 31 + to * 7 + tag * 3 + static_cast<int>(i)) & 0xff);
  }
  return v;
}

TEST(DistP2P, TaggedMessagesArriveInOrderWithExactCounters) {
  for (int world : {2, 3, 5}) {
    run_ranks(world, [&](Communicator& comm) {
      const int r = comm.rank();
      const int next = (r + 1) % world;
      const int prev = (r + world - 1) % world;
      const auto before = comm.counters();
      // Two tags, three messages each, sizes differing; posted before anything waits.
      std::vector<std::vector<std::byte>> out, in;
      std::vector<P2PRequest> reqs;
      const std::size_t sizes[] = {1, 1000, 3};
      for (int tag : {1, 7}) {
        for (std::size_t n : sizes) {
          out.push_back(pattern(r, next, tag, n + static_cast<std::size_t>(r)));
          in.emplace_back(n + static_cast<std::size_t>(prev));
        }
      }
      for (std::size_t i = 0; i < out.size(); ++i) {
        reqs.push_back(comm.isend_bytes(next, i < 3 ? 1 : 7, out[i]));
      }
      for (std::size_t i = 0; i < in.size(); ++i) {
        reqs.push_back(comm.irecv_bytes(prev, i < 3 ? 1 : 7, in[i]));
      }
      for (auto& q : reqs) comm.wait(q);
      std::uint64_t sent = 0, received = 0;
      for (std::size_t i = 0; i < in.size(); ++i) {
        const int tag = i < 3 ? 1 : 7;
        EXPECT_EQ(in[i], pattern(prev, r, tag, in[i].size())) << "message " << i;
        sent += out[i].size();
        received += in[i].size();
      }
      const auto after = comm.counters();
      EXPECT_EQ(after.bytes_sent - before.bytes_sent, sent);
      EXPECT_EQ(after.bytes_received - before.bytes_received, received);
      EXPECT_EQ(after.operations - before.operations, 12u);
    });
  }
}

TEST(DistP2P, ReceiveFromAnyRankNamesTheSender) {
  const int world = 4;
  run_ranks(world, [&](Communicator& comm) {
    const int r = comm.rank();
    if (r == 0) {
      std::set<int> seen;
      for (int k = 0; k < 2 * (world - 1); ++k) {
        std::vector<std::byte> buf(16);
        const int src = comm.recv_bytes_any(5, buf);
        ASSERT_GE(src, 1);
        ASSERT_LT(src, world);
        // The first byte says who sent it, the second which of its two messages.
        EXPECT_EQ(static_cast<int>(buf[0]), src);
        seen.insert(src * 10 + static_cast<int>(buf[1]));
      }
      EXPECT_EQ(seen.size(), static_cast<std::size_t>(2 * (world - 1)));
    } else {
      for (int k = 0; k < 2; ++k) {
        std::vector<std::byte> buf(16, std::byte{0});
        buf[0] = static_cast<std::byte>(r);
        buf[1] = static_cast<std::byte>(k);
        comm.send_bytes(0, 5, buf);
      }
    }
  });
}

TEST(DistP2P, EmptyMessagesAreSkippedOnBothSides) {
  run_ranks(2, [&](Communicator& comm) {
    const int peer = 1 - comm.rank();
    comm.send_bytes(peer, 0, {});
    comm.recv_bytes(peer, 0, {});
    EXPECT_EQ(comm.counters().operations, 0u);
    comm.barrier();  // neither rank leaves while the other may still be connecting
  });
}

TEST(DistP2P, RejectsBadPeersAndTags) {
  run_ranks(2, [&](Communicator& comm) {
    std::vector<std::byte> b(4);
    EXPECT_THROW(comm.send_bytes(comm.rank(), 0, b), InvalidArgument);
    EXPECT_THROW(comm.send_bytes(2, 0, b), InvalidArgument);
    EXPECT_THROW(comm.recv_bytes(-1, 0, b), InvalidArgument);
    EXPECT_THROW(comm.recv_bytes(1 - comm.rank(), -3, b), InvalidArgument);
    EXPECT_THROW(comm.recv_bytes_any(0, {}), InvalidArgument);
    comm.barrier();
  });
}

TEST(DistP2P, SilentPeerTimesOutNamingIt) {
  const Store store = Store::in_process();
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      RendezvousConfig c = test::local_config(r, 2);
      c.timeout = std::chrono::milliseconds(1500);
      Communicator comm(store, c);
      if (r == 0) {
        std::vector<std::byte> b(8);
        try {
          comm.recv_bytes(1, 3, b);
        } catch (const CommError& e) {
          errors[0] = e.what();
        }
        // Broken afterwards: every later operation fails at once.
        try {
          comm.send_bytes(1, 3, b);
        } catch (const CommError& e) {
          errors[1] = e.what();
        }
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_NE(errors[0].find("recv from rank 1 (tag 3"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("unusable"), std::string::npos) << errors[1];
}

}  // namespace
}  // namespace gradcomp::dist
