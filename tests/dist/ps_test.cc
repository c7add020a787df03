// The parameter server: key sharding (pure), ps-sync against the allgather reducer,
// the compressed downlink, ps-async with a staleness bound of 0 against synchronous
// SGD, and hostile messages rejected by the server. One thread per rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../../src/dist/ps/protocol.h"
#include "dist_test_support.h"
#include "gradcomp/dist/ps.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/error.h"
#include "gradcomp/wire.h"

namespace gradcomp::dist {
namespace {

using test::run_ranks;

// ---- keys -------------------------------------------------------------------------------

void check_plan(const std::vector<BucketShape>& shapes, int servers, std::size_t split) {
  const std::vector<PsKey> keys = plan_keys(shapes, servers, split);
  std::size_t total = 0, biggest = 0;
  for (const auto& s : shapes) {
    total += s.numel;
    biggest = std::max(biggest, s.numel);
  }
  // Every element of every bucket exactly once, in (bucket, offset) order.
  std::vector<std::vector<int>> seen(shapes.size());
  for (std::size_t b = 0; b < shapes.size(); ++b) seen[b].assign(shapes[b].numel, 0);
  std::vector<std::size_t> load(static_cast<std::size_t>(servers), 0);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const PsKey& k = keys[i];
    ASSERT_EQ(k.id, i);
    ASSERT_LT(k.bucket, shapes.size());
    ASSERT_EQ(k.bucket_id, shapes[k.bucket].id);
    ASSERT_GE(k.server, 0);
    ASSERT_LT(k.server, servers);
    ASSERT_LE(k.offset + k.numel, shapes[k.bucket].numel);
    if (i > 0) {
      const PsKey& p = keys[i - 1];
      ASSERT_TRUE(p.bucket < k.bucket || (p.bucket == k.bucket && p.offset < k.offset));
    }
    for (std::size_t e = k.offset; e < k.offset + k.numel; ++e) ++seen[k.bucket][e];
    load[static_cast<std::size_t>(k.server)] += k.numel;
    if (shapes[k.bucket].numel > split && servers > 1) {
      EXPECT_EQ(k.parts, static_cast<std::uint32_t>(servers)) << "bucket " << k.bucket;
    } else {
      EXPECT_EQ(k.parts, 1u);
      EXPECT_EQ(k.numel, shapes[k.bucket].numel);
    }
    if (k.rows > 0) {
      const std::size_t cols = shapes[k.bucket].numel / shapes[k.bucket].rows;
      EXPECT_EQ(k.numel, k.rows * cols);
      EXPECT_EQ(k.offset % cols, 0u);
    }
  }
  for (std::size_t b = 0; b < shapes.size(); ++b) {
    for (std::size_t e = 0; e < shapes[b].numel; ++e) {
      ASSERT_EQ(seen[b][e], 1) << "bucket " << b << " element " << e << " servers " << servers;
    }
  }
  for (int s = 0; s < servers; ++s) {
    EXPECT_LE(load[static_cast<std::size_t>(s)],
              total / static_cast<std::size_t>(servers) + biggest)
        << "server " << s << " of " << servers;
  }
  // A pure function: the same plan again.
  const std::vector<PsKey> again = plan_keys(shapes, servers, split);
  ASSERT_EQ(again.size(), keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(again[i].server, keys[i].server);
}

TEST(PsKeys, CoverEveryElementOnceWithinTheLoadBound) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<BucketShape> shapes;
    const int n = 1 + static_cast<int>(rng() % 9);
    for (int b = 0; b < n; ++b) {
      const std::size_t numel = rng() % 5 == 0 ? rng() % 3 : 1 + rng() % 50000;
      const std::size_t rows = numel > 10 && rng() % 2 ? 10 : 0;
      shapes.push_back({static_cast<std::uint32_t>(b), rows > 0 ? numel / 10 * 10 : numel,
                        rng() % 4 != 0, rows});
    }
    for (int servers : {1, 2, 3, 5}) {
      for (std::size_t split : {std::size_t{1000}, std::size_t{20000}, kDefaultSplitElements}) {
        check_plan(shapes, servers, split);
      }
    }
  }
}

TEST(PsKeys, TheMlpSplitsEvenly) {
  // The default MLP 784-1536-1536-10: its two big layers split, the rest placed whole.
  const std::vector<BucketShape> shapes = {{0, 784 * 1536, true, 1536},
                                           {1, 1536 * 1536, true, 1536},
                                           {2, 1536 * 10, true, 10},
                                           {3, 1536 + 1536 + 10, false, 0}};
  const auto keys = plan_keys(shapes, 2, kDefaultSplitElements);
  ASSERT_EQ(keys.size(), 6u);
  EXPECT_EQ(keys[0].rows, 768u);  // half the rows of fc1
  std::size_t load[2] = {0, 0};
  for (const auto& k : keys) load[k.server] += k.numel;
  EXPECT_LE(std::max(load[0], load[1]) - std::min(load[0], load[1]), 1536u * 10u + 3082u);
  EXPECT_THROW(plan_keys(shapes, 0), InvalidArgument);
}

// ---- ps-sync against allgather -----------------------------------------------------------

const std::vector<std::size_t> kSizes = {3000, 1, 700, 2500, 64};

float grad_value(int rank, std::uint64_t step, std::size_t b, std::size_t i) {
  const auto h = static_cast<std::uint32_t>((rank + 1) * 2654435761u ^ (step * 40503u) ^ (b * 97u) ^
                                            (i * 2246822519u));
  return static_cast<float>(h % 2001) / 1000.0f - 1.0f;
}

std::vector<BucketShape> test_shapes() {
  std::vector<BucketShape> shapes;
  for (std::size_t b = 0; b < kSizes.size(); ++b) {
    // The last bucket is the dense one (as the layout makes it).
    shapes.push_back({static_cast<std::uint32_t>(b), kSizes[b], b + 1 != kSizes.size(), 0});
  }
  return shapes;
}

// Each worker's buckets after `steps` reductions (step 0 all dense, the warm-up).
using Outputs = std::vector<std::vector<std::vector<float>>>;  // [worker][step*b] values

void fill(std::vector<std::vector<float>>& bufs, int rank, std::uint64_t step) {
  for (std::size_t b = 0; b < bufs.size(); ++b) {
    for (std::size_t i = 0; i < bufs[b].size(); ++i) bufs[b][i] = grad_value(rank, step, b, i);
  }
}

std::vector<BucketRef> refs_of(std::vector<std::vector<float>>& bufs,
                               const std::vector<BucketShape>& shapes, bool compress) {
  std::vector<BucketRef> refs;
  for (std::size_t b = 0; b < bufs.size(); ++b) {
    refs.push_back({shapes[b].id, bufs[b], compress && shapes[b].compressible});
  }
  return refs;
}

constexpr int kSteps = 4;

Outputs run_allgather(const std::string& spec, int workers) {
  Outputs out(static_cast<std::size_t>(workers));
  const auto shapes = test_shapes();
  run_ranks(workers, [&](Communicator& comm) {
    auto reducer = make_reducer(spec, ReducerKind::kAllgather, comm, shapes);
    std::vector<std::vector<float>> bufs;
    for (auto n : kSizes) bufs.emplace_back(n);
    for (int step = 0; step < kSteps; ++step) {
      fill(bufs, comm.rank(), static_cast<std::uint64_t>(step));
      StepContext ctx;
      ctx.seed = 9;
      ctx.step = static_cast<std::uint64_t>(step);
      ctx.world = static_cast<std::uint32_t>(workers);
      reducer->reduce(refs_of(bufs, shapes, step > 0), ctx);
      for (auto& b : bufs) {
        auto& o = out[static_cast<std::size_t>(comm.rank())];
        o.push_back(b);
      }
    }
  });
  return out;
}

Outputs run_ps_sync(const std::string& spec, int workers, int servers, Downlink downlink,
                    std::size_t split) {
  Outputs out(static_cast<std::size_t>(workers));
  const auto shapes = test_shapes();
  PsConfig cfg;
  cfg.topology = Topology::kPsSync;
  cfg.servers = servers;
  cfg.workers = workers;
  cfg.compressor = spec;
  cfg.downlink = downlink;
  cfg.split_elements = split;
  cfg.seed = 9;
  run_ranks(workers + servers, [&](Communicator& comm) {
    if (cfg.is_server(comm.rank())) {
      const PsServerReport rep = run_ps_server(cfg, comm, shapes);
      EXPECT_EQ(rep.steps, static_cast<std::uint64_t>(kSteps));
      return;
    }
    auto worker = make_ps_worker(cfg, comm, shapes);
    // ps-sync: the workers keep their weights and step their own optimizers.
    EXPECT_EQ(dynamic_cast<WeightExchange*>(worker.get()), nullptr);
    std::vector<std::vector<float>> bufs;
    for (auto n : kSizes) bufs.emplace_back(n);
    for (int step = 0; step < kSteps; ++step) {
      fill(bufs, comm.rank(), static_cast<std::uint64_t>(step));
      StepContext ctx;
      ctx.seed = 9;
      ctx.step = static_cast<std::uint64_t>(step);
      ctx.world = static_cast<std::uint32_t>(workers);
      worker->reduce(refs_of(bufs, shapes, step > 0), ctx);
      const ReduceStats st = worker->take_stats();
      EXPECT_GT(st.bytes_sent, 0u);
      EXPECT_GT(st.bytes_received, 0u);
      for (auto& b : bufs) out[static_cast<std::size_t>(comm.rank())].push_back(b);
    }
    worker->finish();
  });
  return out;
}

void expect_same(const Outputs& a, const Outputs& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t w = 0; w < a.size(); ++w) {
    ASSERT_EQ(a[w].size(), b[w].size());
    for (std::size_t j = 0; j < a[w].size(); ++j) {
      const std::size_t bucket = j % kSizes.size();
      const bool dense = bucket + 1 == kSizes.size() || j < kSizes.size();
      for (std::size_t i = 0; i < a[w][j].size(); ++i) {
        if (dense) {
          // Summed by a ring allreduce on one side, in worker order on the other.
          ASSERT_NEAR(a[w][j][i], b[w][j][i], 1e-6f) << what << " worker " << w << " buffer " << j;
        } else {
          ASSERT_EQ(a[w][j][i], b[w][j][i])
              << what << " worker " << w << " buffer " << j << " element " << i;
        }
      }
    }
  }
}

TEST(PsSync, DenseDownlinkEqualsTheAllgatherReducer) {
  for (const std::string spec : {"ef(topk:ratio=0.05)", "2bit", "qsgd"}) {
    const Outputs ref = run_allgather(spec, 3);
    for (int servers : {1, 2}) {
      const Outputs ps = run_ps_sync(spec, 3, servers, Downlink::kDense, kDefaultSplitElements);
      expect_same(ref, ps, spec + " servers " + std::to_string(servers));
    }
  }
  // 2-bit with a fixed threshold quantizes element by element: split keys change nothing.
  // (The adaptive default's tau is the mean |p| of each message, i.e. of each key's range
  // when a bucket is split, so there split keys do change the result.)
  const Outputs ref = run_allgather("2bit:threshold=0.5", 2);
  expect_same(ref, run_ps_sync("2bit:threshold=0.5", 2, 3, Downlink::kDense, 500), "2bit split");
}

TEST(PsSync, CompressedDownlinkIsSparseAndTheSameOnEveryWorker) {
  const Outputs ps =
      run_ps_sync("ef(topk:ratio=0.05)", 3, 2, Downlink::kCompressed, kDefaultSplitElements);
  for (std::size_t j = 0; j < ps[0].size(); ++j) {
    EXPECT_EQ(ps[0][j], ps[1][j]);
    EXPECT_EQ(ps[0][j], ps[2][j]);
    const std::size_t bucket = j % kSizes.size();
    if (j >= kSizes.size() && bucket + 1 != kSizes.size()) {
      const auto nz =
          std::count_if(ps[0][j].begin(), ps[0][j].end(), [](float v) { return v != 0; });
      EXPECT_LE(static_cast<std::size_t>(nz),
                static_cast<std::size_t>(std::ceil(0.05 * static_cast<double>(kSizes[bucket]))))
          << "buffer " << j;
    }
  }
}

TEST(PsSync, MismatchedConfigurationIsRejectedAtTheHandshake) {
  const auto shapes = test_shapes();
  PsConfig cfg;
  cfg.servers = 1;
  cfg.workers = 1;
  cfg.compressor = "2bit";
  std::string worker_error, server_error;
  run_ranks(2, [&](Communicator& comm) {
    if (comm.rank() == 1) {
      try {
        run_ps_server(cfg, comm, shapes);
      } catch (const InvalidArgument& e) {
        server_error = e.what();
      }
    } else {
      PsConfig other = cfg;
      other.compressor = "2bit:threshold=0.25";
      try {
        make_ps_worker(other, comm, shapes);
      } catch (const InvalidArgument& e) {
        worker_error = e.what();
      }
    }
  });
  EXPECT_NE(server_error.find("worker 0 (rank 0) runs another configuration"), std::string::npos)
      << server_error;
  EXPECT_NE(worker_error.find("server 0 (rank 1) runs another configuration"), std::string::npos)
      << worker_error;
}

// ---- hostile pushes ----------------------------------------------------------------------

// A hand-made worker 0 (world: 1 worker + 1 server) that shakes hands properly, then
// sends `frame` and `payload`; returns the server's error.
std::string server_error_for(const std::function<void(ps::Frame&, std::vector<std::byte>&)>& spoil,
                             bool send_payload = true) {
  const auto shapes = test_shapes();
  PsConfig cfg;
  cfg.servers = 1;
  cfg.workers = 1;
  cfg.compressor = "2bit";
  std::string error;
  run_ranks(2, [&](Communicator& comm) {
    if (comm.rank() == 1) {
      try {
        run_ps_server(cfg, comm, shapes);
        error = "(accepted)";
      } catch (const CorruptMessage& e) {
        error = e.what();
      }
      return;
    }
    ps::Frame hello;
    hello.kind = ps::Kind::kHello;
    hello.aux = 1;
    hello.aux64 = ps::config_hash(cfg, "ef(2bit:threshold=0,scale=2)", shapes);
    ps::send_message(comm, 1, ps::kTagPushFrame, ps::kTagPushPayload, hello, {});
    ps::FrameBytes ack{};
    comm.recv_bytes(1, ps::kTagReplyFrame, ack);
    ASSERT_EQ(ps::decode_frame(ack, 1, "server").aux, 1u) << "handshake refused";
    // A valid push from a real worker's encoder would be long; build one by hand: every
    // key dense (allowed for any key), then let the test spoil it.
    std::vector<std::byte> payload;
    const auto keys = plan_keys(shapes, 1);
    for (const auto& k : keys) {
      std::vector<std::byte> rec(ps::kRecordHeaderBytes + 4 * k.numel, std::byte{0});
      store_le<std::uint32_t>(rec.data(), k.id);
      rec[4] = std::byte{1};
      store_le<std::uint32_t>(rec.data() + 8, static_cast<std::uint32_t>(4 * k.numel));
      payload.insert(payload.end(), rec.begin(), rec.end());
    }
    ps::Frame f;
    f.kind = ps::Kind::kPush;
    f.records = static_cast<std::uint32_t>(keys.size());
    f.payload_bytes = payload.size();
    spoil(f, payload);
    ps::FrameBytes fb = ps::encode_frame(f);
    if (f.payload_bytes == 0xBAD) store_le<std::uint32_t>(fb.data(), 0x12345678);  // bad magic
    comm.send_bytes(1, ps::kTagPushFrame, fb);
    if (send_payload)
      comm.send_bytes(1, ps::kTagPushPayload, std::span(payload).first(f.payload_bytes));
  });
  return error;
}

TEST(PsCorrupt, ServerRejectsBadPushes) {
  // Frame-level faults are caught before the payload is read (so none is sent).
  EXPECT_NE(server_error_for([](ps::Frame& f, std::vector<std::byte>&) { f.payload_bytes = 0xBAD; },
                             false)
                .find("bad magic"),
            std::string::npos);
  EXPECT_NE(server_error_for([](ps::Frame& f, std::vector<std::byte>&) { f.sender = 5; }, false)
                .find("claims to come from rank 5"),
            std::string::npos);
  EXPECT_NE(server_error_for([](ps::Frame& f, std::vector<std::byte>&) { f.records = 2; }, false)
                .find("announces 2 records"),
            std::string::npos);
  EXPECT_NE(server_error_for([](ps::Frame&, std::vector<std::byte>& p) {
              store_le<std::uint32_t>(p.data(), 77);  // unknown key
            }).find("has key 77 (unknown"),
            std::string::npos);
  EXPECT_NE(server_error_for([](ps::Frame&, std::vector<std::byte>& p) {
              p[4] = std::byte{9};  // unknown record kind
            }).find("record kind 9"),
            std::string::npos);
  EXPECT_NE(server_error_for([](ps::Frame&, std::vector<std::byte>& p) {
              // key 0 as a codec message with a garbage header
              p[4] = std::byte{2};
            }).find("2bit"),
            std::string::npos);
  EXPECT_NE(server_error_for([](ps::Frame&, std::vector<std::byte>& p) {
              p[4] = std::byte{3};  // key 0 as a count sketch: this server runs 2bit
            }).find("never sketched"),
            std::string::npos);
  EXPECT_NE(server_error_for([](ps::Frame&, std::vector<std::byte>& p) {
              p[4] = std::byte{5};  // a sparse update is a reply, never a push
            }).find("which no push carries"),
            std::string::npos);
  const std::string dense_key = server_error_for([](ps::Frame&, std::vector<std::byte>& p) {
    // The dense bucket (last key) as a codec message.
    std::size_t pos = 0;
    for (std::size_t b = 0; b + 1 < kSizes.size(); ++b)
      pos += ps::kRecordHeaderBytes + 4 * kSizes[b];
    p[pos + 4] = std::byte{2};
  });
  EXPECT_NE(dense_key.find("never compressed"), std::string::npos) << dense_key;
}

// ---- ps-async ------------------------------------------------------------------------------

// A quadratic per worker: g_w(x) = x - target_w; synchronous SGD moves x by
// lr * mean_w(x - target_w) per step.
float target(int w, std::size_t b, std::size_t i) { return grad_value(w, 99, b, i); }

TEST(PsAsync, MaxStalenessZeroBehavesLikeSync) {
  const int workers = 3, servers = 2, steps = 6;
  const float lr = 0.3f;
  const auto shapes = test_shapes();
  // Reference: synchronous SGD (every bucket dense).
  std::vector<std::vector<float>> x;
  for (auto n : kSizes) x.emplace_back(n, 0.5f);
  for (int s = 0; s < steps; ++s) {
    for (std::size_t b = 0; b < x.size(); ++b) {
      for (std::size_t i = 0; i < x[b].size(); ++i) {
        float mean = 0;
        for (int w = 0; w < workers; ++w) mean += (x[b][i] - target(w, b, i)) / workers;
        x[b][i] -= lr * mean;
      }
    }
  }
  PsConfig cfg;
  cfg.topology = Topology::kPsAsync;
  cfg.servers = servers;
  cfg.workers = workers;
  cfg.compressor = "none";
  cfg.max_staleness = 0;
  cfg.split_elements = 1000;
  std::vector<std::vector<float>> init;
  for (auto n : kSizes) init.emplace_back(n, 0.5f);
  std::vector<std::span<const float>> init_spans(init.begin(), init.end());
  StalenessHistogram hist;
  run_ranks(workers + servers, [&](Communicator& comm) {
    if (cfg.is_server(comm.rank())) {
      run_ps_server(cfg, comm, shapes, init_spans);
      return;
    }
    auto worker = make_ps_worker(cfg, comm, shapes);
    auto* const weight_exchange = dynamic_cast<WeightExchange*>(worker.get());
    ASSERT_NE(weight_exchange, nullptr);
    std::vector<std::vector<float>> wts = init, grads = init;
    std::vector<std::span<float>> wspans(wts.begin(), wts.end());
    for (int s = 0; s < steps; ++s) {
      for (std::size_t b = 0; b < wts.size(); ++b) {
        for (std::size_t i = 0; i < wts[b].size(); ++i) {
          grads[b][i] = wts[b][i] - target(comm.rank(), b, i);
        }
      }
      StepContext ctx;
      ctx.step = static_cast<std::uint64_t>(s);
      ctx.lr = lr;
      weight_exchange->exchange_weights(refs_of(grads, shapes, true), wspans, ctx);
    }
    worker->finish();
    if (comm.rank() == 0) {
      hist = worker->staleness();
    } else {
      EXPECT_TRUE(worker->staleness().empty());
    }
    for (std::size_t b = 0; b < wts.size(); ++b) {
      for (std::size_t i = 0; i < wts[b].size(); ++i) {
        ASSERT_NEAR(wts[b][i], x[b][i], 1e-5f) << "worker " << comm.rank() << " bucket " << b;
      }
    }
  });
  // Every push of every worker to every server, each at most W-1 updates stale.
  std::uint64_t pushes = 0;
  for (const auto& [s, n] : hist) {
    EXPECT_LT(s, static_cast<std::uint64_t>(workers));
    pushes += n;
  }
  EXPECT_EQ(pushes, static_cast<std::uint64_t>(workers * steps * servers));
}

TEST(PsAsync, UnboundedRunsToTheEnd) {
  const int workers = 3, servers = 1, steps = 20;
  const auto shapes = test_shapes();
  PsConfig cfg;
  cfg.topology = Topology::kPsAsync;
  cfg.servers = servers;
  cfg.workers = workers;
  cfg.compressor = "ef(topk:ratio=0.1)";
  cfg.momentum = 0.9;
  std::vector<std::vector<float>> init;
  for (auto n : kSizes) init.emplace_back(n, 0.0f);
  std::vector<std::span<const float>> init_spans(init.begin(), init.end());
  StalenessHistogram hist;
  run_ranks(workers + servers, [&](Communicator& comm) {
    if (cfg.is_server(comm.rank())) {
      const auto rep = run_ps_server(cfg, comm, shapes, init_spans);
      EXPECT_EQ(rep.steps, static_cast<std::uint64_t>(workers * steps));
      return;
    }
    auto worker = make_ps_worker(cfg, comm, shapes);
    auto* const weight_exchange = dynamic_cast<WeightExchange*>(worker.get());
    ASSERT_NE(weight_exchange, nullptr);
    std::vector<std::vector<float>> wts = init, grads = init;
    std::vector<std::span<float>> wspans(wts.begin(), wts.end());
    for (int s = 0; s < steps; ++s) {
      fill(grads, comm.rank(), static_cast<std::uint64_t>(s));
      StepContext ctx;
      ctx.step = static_cast<std::uint64_t>(s);
      ctx.lr = 0.1f;
      weight_exchange->exchange_weights(refs_of(grads, shapes, true), wspans, ctx);
    }
    worker->finish();
    if (comm.rank() == 0) hist = worker->staleness();
  });
  std::uint64_t pushes = 0;
  for (const auto& [s, n] : hist) pushes += n;
  EXPECT_EQ(pushes, static_cast<std::uint64_t>(workers * steps));
}

// The momentum rule's closed forms (ps.h): m - (1 - 1/W) floored at 0, lr scaled to keep
// lr / (1 - m); as given, nothing changes.
TEST(PsAsync, MomentumRuleTakesOutWhatAsynchronyAdds) {
  PsConfig c;
  c.topology = Topology::kPsAsync;
  auto rule = [&](int workers, double m, AsyncMomentum r) {
    c.workers = workers;
    c.momentum = m;
    c.async_momentum = r;
    return async_server_optimizer(c);
  };
  const auto four = rule(4, 0.9, AsyncMomentum::kCompensate);
  EXPECT_NEAR(four.implicit, 0.75, 1e-12);
  EXPECT_NEAR(four.momentum, 0.15, 1e-12);
  EXPECT_NEAR(four.lr_scale, 8.5, 1e-9);
  const auto two = rule(2, 0.9, AsyncMomentum::kCompensate);
  EXPECT_NEAR(two.momentum, 0.4, 1e-12);
  EXPECT_NEAR(two.lr_scale, 6.0, 1e-9);
  const auto floored = rule(4, 0.5, AsyncMomentum::kCompensate);
  EXPECT_EQ(floored.momentum, 0.0);
  EXPECT_NEAR(floored.lr_scale, 2.0, 1e-12);
  for (const auto& same :
       {rule(1, 0.9, AsyncMomentum::kCompensate), rule(4, 0.9, AsyncMomentum::kAsGiven)}) {
    EXPECT_EQ(same.momentum, 0.9);
    EXPECT_EQ(same.lr_scale, 1.0);
  }
  const auto none = rule(4, 0.0, AsyncMomentum::kCompensate);
  EXPECT_EQ(none.momentum, 0.0);
  EXPECT_EQ(none.lr_scale, 1.0);
  EXPECT_EQ(parse_async_momentum("as-given"), AsyncMomentum::kAsGiven);
  EXPECT_STREQ(to_string(parse_async_momentum("compensate")), "compensate");
  EXPECT_THROW(parse_async_momentum("half"), InvalidArgument);
}

// What the server applies, whatever the order of the pushes: every worker pushes the same
// constant gradient c, so after k pushes in all, x_k = x_0 - lr*s/W * c * sum_{j=1..k}
// (1 - m^j) / (1 - m) with the rule's m and s. Each worker ends at x_k for the pushes
// applied before its last reply; the last one at k = W * steps.
TEST(PsAsync, ServerAppliesTheRulesMomentumAndLr) {
  const int workers = 2, steps = 5;
  const float lr = 0.1f, c = 1.0f, x0 = 0.5f;
  const std::vector<BucketShape> shapes = {{.id = 0, .numel = 3, .compressible = false}};
  for (const AsyncMomentum r : {AsyncMomentum::kCompensate, AsyncMomentum::kAsGiven}) {
    PsConfig cfg;
    cfg.topology = Topology::kPsAsync;
    cfg.servers = 1;
    cfg.workers = workers;
    cfg.compressor = "none";
    cfg.momentum = 0.9;
    cfg.async_momentum = r;
    const AsyncServerOptimizer opt = async_server_optimizer(cfg);
    std::vector<double> expected(workers * steps + 1, x0);
    double v = 0, x = x0;
    for (std::size_t k = 1; k < expected.size(); ++k) {
      v = opt.momentum * v + c;
      x -= lr * opt.lr_scale / workers * v;
      expected[k] = x;
    }
    std::vector<float> init(3, x0);
    std::vector<std::span<const float>> init_spans = {init};
    std::vector<float> final_x(workers, 0.0f);
    run_ranks(workers + 1, [&](Communicator& comm) {
      if (cfg.is_server(comm.rank())) {
        run_ps_server(cfg, comm, shapes, init_spans);
        return;
      }
      auto worker = make_ps_worker(cfg, comm, shapes);
      auto* const weight_exchange = dynamic_cast<WeightExchange*>(worker.get());
      ASSERT_NE(weight_exchange, nullptr);
      std::vector<std::vector<float>> wts = {init}, grads = {std::vector<float>(3, c)};
      std::vector<std::span<float>> wspans(wts.begin(), wts.end());
      for (int s = 0; s < steps; ++s) {
        StepContext ctx;
        ctx.step = static_cast<std::uint64_t>(s);
        ctx.lr = lr;
        weight_exchange->exchange_weights(refs_of(grads, shapes, true), wspans, ctx);
      }
      worker->finish();
      final_x[static_cast<std::size_t>(comm.rank())] = wts[0][1];
    });
    bool someone_last = false;
    for (int w = 0; w < workers; ++w) {
      const auto it = std::find_if(expected.begin() + steps, expected.end(), [&](double e) {
        return std::abs(e - final_x[static_cast<std::size_t>(w)]) < 1e-5;
      });
      EXPECT_NE(it, expected.end())
          << to_string(r) << ": worker " << w << " at " << final_x[static_cast<std::size_t>(w)];
      someone_last = someone_last || it == expected.end() - 1;
    }
    EXPECT_TRUE(someone_last) << to_string(r) << ": expected " << expected.back();
  }
}

// The servers checkpoint whenever a worker is the first to end an epoch, whichever worker
// that is: here worker 0 never ends one (one step of an epoch of 2) while worker 1 ends
// two, so the server saves after each of them (keyed to worker 0 alone it saved only at
// the end, and a run whose worker 0 lagged had no server checkpoint beside worker 1's).
TEST(PsAsync, ServersCheckpointWhenAnyWorkerLeadsIntoANewEpoch) {
  const std::vector<BucketShape> shapes = {{.id = 0, .numel = 4, .compressible = false}};
  PsConfig cfg;
  cfg.topology = Topology::kPsAsync;
  cfg.servers = 1;
  cfg.workers = 2;
  cfg.compressor = "none";
  std::vector<float> init(4, 0.0f);
  std::vector<std::span<const float>> init_spans = {init};
  std::vector<std::uint64_t> saved_versions;
  PsServerCheckpoints ck;
  ck.save = [&](std::uint64_t step, std::span<const StateBuffer>, std::span<const std::int64_t>) {
    saved_versions.push_back(step);
  };
  run_ranks(3, [&](Communicator& comm) {
    if (cfg.is_server(comm.rank())) {
      run_ps_server(cfg, comm, shapes, init_spans, builtin_registry(), ck);
      return;
    }
    auto worker = make_ps_worker(cfg, comm, shapes);
    auto* const weight_exchange = dynamic_cast<WeightExchange*>(worker.get());
    ASSERT_NE(weight_exchange, nullptr);
    std::vector<std::vector<float>> wts = {init}, grads = {std::vector<float>(4, 1.0f)};
    std::vector<std::span<float>> wspans(wts.begin(), wts.end());
    const int steps = comm.rank() == 0 ? 1 : 4;
    for (int s = 0; s < steps; ++s) {
      StepContext ctx;
      ctx.step = static_cast<std::uint64_t>(s);
      ctx.steps_per_epoch = 2;
      ctx.lr = 0.1f;
      weight_exchange->exchange_weights(refs_of(grads, shapes, true), wspans, ctx);
    }
    worker->finish();
  });
  // Worker 1's two epoch ends, then the final save (versions grow: 5 pushes in all); the
  // final one is skipped when worker 1's last push was the 5th (that version is saved).
  ASSERT_GE(saved_versions.size(), 2u);
  ASSERT_LE(saved_versions.size(), 3u);
  EXPECT_LT(saved_versions[0], saved_versions[1]);
  EXPECT_EQ(saved_versions.back(), 5u);
}

}  // namespace
}  // namespace gradcomp::dist
