#include "train/local_reducer.h"

#include <algorithm>
#include <chrono>

#include "gradcomp/error.h"

namespace gradcomp::train {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

LocalReducer::LocalReducer(const Method& method, std::span<const BucketShape> buckets)
    : compressor_(method.spec()) {
  if (method.is_scheme()) {
    throw InvalidArgument("local reduce: " + method.spec() +
                          " is a reducer scheme: it needs peers (use a codec)");
  }
  slots_.reserve(buckets.size());
  for (const BucketShape& b : buckets) {
    Slot s;
    s.shape = b;
    if (b.compressible) {
      s.memory = method.make_memory(b.numel);
      s.message.resize(s.memory->max_encoded_bytes());
    }
    slots_.push_back(std::move(s));
  }
}

void LocalReducer::reduce(std::span<const BucketRef> buckets, const StepContext& ctx) {
  if (buckets.size() != slots_.size()) {
    throw InvalidArgument("local reduce: " + std::to_string(buckets.size()) +
                          " buckets, set up for " + std::to_string(slots_.size()));
  }
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    const BucketRef& b = buckets[i];
    Slot& s = slots_[i];
    if (b.id != s.shape.id || b.grad.size() != s.shape.numel) {
      throw InvalidArgument("local reduce: bucket " + std::to_string(b.id) + " of " +
                            std::to_string(b.grad.size()) + " elements, expected bucket " +
                            std::to_string(s.shape.id) + " of " + std::to_string(s.shape.numel));
    }
    if (!b.compressed || !s.memory) {
      // One worker's mean is its own gradient; a dense exchange would send it as fp32.
      stats_.bytes_sent += b.grad.size() * sizeof(float);
      stats_.bytes_received += b.grad.size() * sizeof(float);
      continue;
    }
    StepContext bucket_ctx = ctx;
    bucket_ctx.bucket = b.id;
    bucket_ctx.world = 1;
    bucket_ctx.rows = static_cast<std::uint32_t>(s.shape.rows);
    auto t0 = std::chrono::steady_clock::now();
    const std::size_t bytes = s.memory->compress(b.grad, bucket_ctx, s.message);
    stats_.encode_seconds += seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    std::fill(b.grad.begin(), b.grad.end(), 0.0f);
    s.memory->codec().decode_add(std::span<const std::byte>(s.message.data(), bytes), b.grad);
    stats_.decode_seconds += seconds_since(t0);
    stats_.bytes_sent += bytes;
    stats_.bytes_received += bytes;
  }
  ++stats_.steps;
}

ReduceStats LocalReducer::take_stats() {
  ReduceStats out = stats_;
  stats_ = ReduceStats{};
  return out;
}

std::vector<StateBuffer> LocalReducer::state() {
  std::vector<StateBuffer> out;
  for (Slot& s : slots_) {
    if (!s.memory) continue;
    for (StateBuffer& sb : s.memory->state()) {
      out.push_back({"bucket" + std::to_string(s.shape.id) + "." + sb.name, sb.data});
    }
  }
  return out;
}

std::string LocalReducer::describe() const {
  for (const Slot& s : slots_) {
    if (s.memory) return "local(" + s.memory->spec() + ")";
  }
  return "local(" + compressor_ + ")";
}

bool LocalReducer::momentum_in_memory() const {
  for (const Slot& s : slots_) {
    if (s.memory) return s.memory->carries_momentum();
  }
  return false;
}

}  // namespace gradcomp::train
