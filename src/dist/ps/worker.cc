// The parameter server's worker (worker.h): construction -- the key plan, one push and
// one reply buffer per server sized for the largest messages, the handshake -- and the
// Reducer and WeightExchange interfaces around a step; and make_ps_worker,
// gradcomp/dist/ps.h's entry point.
#include "worker.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gradcomp/error.h"
#include "protocol.h"
#include "sketch_plan.h"

namespace gradcomp::dist::ps {

Worker::Worker(const PsConfig& config, Communicator& comm, std::span<const BucketShape> buckets,
               const CodecRegistry& registry)
    : cfg_(config), comm_(comm), shapes_(buckets.begin(), buckets.end()) {
  if (cfg_.topology == Topology::kAllreduce) {
    throw InvalidArgument("ps worker: topology allreduce is not a parameter server");
  }
  if (cfg_.servers < 1 || cfg_.workers < 1 || comm_.world_size() != cfg_.servers + cfg_.workers ||
      comm_.rank() >= cfg_.workers) {
    throw InvalidArgument("ps worker: rank " + std::to_string(comm_.rank()) + " of " +
                          std::to_string(comm_.world_size()) + " is not one of " +
                          std::to_string(cfg_.workers) + " workers beside " +
                          std::to_string(cfg_.servers) + " servers");
  }
  me_ = cfg_.role_of(comm_.rank());
  keys_ = plan_keys(shapes_, cfg_.servers, cfg_.split_elements);
  const Method method = cfg_.method(registry);
  sketch_ = ps::sketch_plan_for(method, keys_);
  std::string canonical;
  if (sketch_) {
    canonical = sketch_->spec;
  } else {
    compress_ = !method.dense_only();  // the none codec sends the gradient itself
    canonical = method.canonical();
    codec_ = method.codec();
  }
  describe_ = std::string(to_string(cfg_.topology)) + "(" + std::to_string(cfg_.servers) +
              " server" + (cfg_.servers > 1 ? "s" : "") + ", " + canonical +
              (cfg_.topology == Topology::kPsSync
                   ? std::string(", downlink ") + to_string(cfg_.downlink)
                   : std::string(cfg_.max_staleness >= 0
                                     ? ", max staleness " + std::to_string(cfg_.max_staleness)
                                     : ", unbounded staleness") +
                         describe_async_optimizer(cfg_)) +
              ")";
  const auto s_count = static_cast<std::size_t>(cfg_.servers);
  by_server_.resize(s_count);
  std::vector<std::size_t> push_cap(s_count, 0), reply_cap(s_count, 0);
  sketch_state_.resize(keys_.size());
  for (const PsKey& k : keys_) {
    const auto s = static_cast<std::size_t>(k.server);
    by_server_[s].push_back(k.id);
    std::size_t max_msg = 4 * k.numel;
    std::size_t reply_msg = 4 * k.numel;
    if (sketch_) {
      max_msg = reply_msg = sketch_->max_record_bytes(k);
      if (sketch_->keys[k.id].on) {
        sketch_state_[k.id].u.assign(k.numel, 0.0f);
        sketch_state_[k.id].v.assign(k.numel, 0.0f);
      }
    }
    if (compress_ && k.compressible) {
      memories_.push_back(method.make_memory(k.numel));
      max_msg = std::max(max_msg, memories_.back()->max_encoded_bytes());
    } else {
      memories_.push_back(nullptr);
    }
    push_cap[s] += ps::kRecordHeaderBytes + max_msg;
    if (compress_ && k.compressible && cfg_.topology == Topology::kPsSync &&
        cfg_.downlink == Downlink::kCompressed) {
      reply_msg = std::max(reply_msg, codec_->max_encoded_bytes(k.numel));
    }
    reply_cap[s] += ps::kRecordHeaderBytes + reply_msg;
  }
  for (std::size_t s = 0; s < s_count; ++s) {
    push_.emplace_back(push_cap[s]);
    reply_.emplace_back(reply_cap[s]);
  }
  push_len_.resize(s_count);
  push_records_.resize(s_count);
  reply_frames_.resize(s_count);
  replies_.resize(s_count);
  version_.assign(s_count, 0);
  handshake(ps::config_hash(cfg_, canonical, shapes_));
}

void Worker::reduce(std::span<const BucketRef> buckets, const StepContext& ctx) {
  if (cfg_.topology != Topology::kPsSync) {
    throw InvalidArgument("ps worker: reduce() on " + describe_ + " (use exchange_weights)");
  }
  exchange(buckets, {}, ctx);
}

void AsyncWorker::exchange_weights(std::span<const BucketRef> grads,
                                   std::span<const std::span<float>> weights,
                                   const StepContext& ctx) {
  push_gradient_pull_weights(grads, weights, ctx);
}

void Worker::push_gradient_pull_weights(std::span<const BucketRef> grads,
                                        std::span<const std::span<float>> weights,
                                        const StepContext& ctx) {
  if (cfg_.topology != Topology::kPsAsync) {
    throw InvalidArgument("ps worker: exchange_weights() on " + describe_);
  }
  if (weights.size() != shapes_.size()) {
    throw InvalidArgument("ps worker: " + std::to_string(weights.size()) +
                          " weight buckets, built for " + std::to_string(shapes_.size()));
  }
  for (std::size_t b = 0; b < weights.size(); ++b) {
    if (weights[b].size() != shapes_[b].numel) {
      throw InvalidArgument("ps worker: weight bucket " + std::to_string(b) + " has " +
                            std::to_string(weights[b].size()) + " elements, expected " +
                            std::to_string(shapes_[b].numel));
    }
  }
  exchange(grads, weights, ctx);
}

ReduceStats Worker::take_stats() { return std::exchange(stats_, {}); }

std::vector<StateBuffer> Worker::state() {
  std::vector<StateBuffer> out;
  for (auto& m : memories_) {
    if (!m) continue;
    for (auto& s : m->state()) out.push_back(std::move(s));
  }
  for (const PsKey& k : keys_) {
    SketchState& st = sketch_state_[k.id];
    if (st.u.empty()) continue;
    out.push_back({"key" + std::to_string(k.id) + ".momentum", st.u});
    out.push_back({"key" + std::to_string(k.id) + ".error", st.v});
  }
  return out;
}

std::string Worker::describe() const { return describe_; }

bool Worker::momentum_in_memory() const {
  if (sketch_) return true;
  for (const auto& m : memories_) {
    if (m) return m->carries_momentum();
  }
  return false;
}

StalenessHistogram Worker::staleness() const { return staleness_; }

}  // namespace gradcomp::dist::ps

namespace gradcomp::dist {

std::unique_ptr<PsWorker> make_ps_worker(const PsConfig& config, Communicator& comm,
                                         std::span<const BucketShape> buckets,
                                         const CodecRegistry& registry) {
  if (config.topology == Topology::kPsAsync) {
    return std::make_unique<ps::AsyncWorker>(config, comm, buckets, registry);
  }
  return std::make_unique<ps::Worker>(config, comm, buckets, registry);
}

}  // namespace gradcomp::dist
