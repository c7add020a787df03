// The device groups of an exchange (gradcomp/device/groups.h).
#include "gradcomp/device/groups.h"

#include <ATen/ATen.h>
#include <c10/core/StreamGuard.h>

#include <algorithm>
#include <limits>

#include "gradcomp/error.h"

namespace gradcomp::device {

namespace {
std::vector<BucketShape> shapes_of(std::span<const Groups::Slot> slots) {
  std::vector<BucketShape> out;
  out.reserve(slots.size());
  for (const Groups::Slot& s : slots) out.push_back(s.shape);
  return out;
}

// Whether any view holds NaN or an infinity: one flag read back from the device.
bool holds_non_finite(const std::vector<at::Tensor>& views) {
  if (views.empty()) return false;
  std::vector<at::Tensor> bad;
  bad.reserve(views.size());
  for (const at::Tensor& v : views) bad.push_back(v.isfinite().logical_not().any());
  return at::stack(bad).any().item<bool>();
}
}  // namespace

Groups::Groups(dist::Exchanger& exchanger, dist::Communicator& comm)
    : exchanger_(exchanger), comm_(comm) {}

Reducer& Groups::group(std::uint64_t key, std::span<const Slot> slots, const at::Device& device) {
  std::vector<BucketShape> shapes = shapes_of(slots);
  auto it = groups_.find(key);
  if (it == groups_.end()) {
    Group g{shapes, make_device_reducer(exchanger_.method(), comm_, shapes, device)};
    it = groups_.emplace(key, std::move(g)).first;
  } else if (it->second.shapes != shapes) {
    throw InvalidArgument("gradcomp exchange: group " + std::to_string(key) +
                          " submitted with other tensors than it was built for");
  }
  return *it->second.reducer;
}

void Groups::submit(std::uint64_t key, const at::Tensor& buffer, std::span<const Slot> slots,
                    bool compress, const StepContext& ctx, dist::Exchanger::Done done,
                    Hooks hooks) {
  if (buffer.scalar_type() != at::kFloat || buffer.dim() != 1 || !buffer.is_contiguous()) {
    throw InvalidArgument(
        "gradcomp exchange: a device bucket must be a contiguous 1-D float32 tensor");
  }
  Reducer* reducer = &group(key, slots, buffer.device());
  std::vector<at::Tensor> views;
  views.reserve(slots.size());
  // bool[] rather than vector<bool>, whose bits make no span; shared: the job is copied.
  const auto compressed = std::make_shared<bool[]>(slots.size());
  const auto size = static_cast<std::size_t>(buffer.numel());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const Slot& s = slots[i];
    if (s.offset > size || s.shape.numel > size - s.offset) {
      throw InvalidArgument("gradcomp exchange: tensor " + std::to_string(s.shape.id) + " at " +
                            std::to_string(s.offset) + " + " + std::to_string(s.shape.numel) +
                            " outside a bucket of " + std::to_string(size));
    }
    views.push_back(buffer.narrow(0, static_cast<std::int64_t>(s.offset),
                                  static_cast<std::int64_t>(s.shape.numel)));
    compressed[i] = compress && s.shape.compressible;
  }
  // Exchanger::NonFinite: only groups that reach a codec need the ranks' agreement.
  const bool agree_finite =
      exchanger_.non_finite() == dist::Exchanger::NonFinite::kSkipStep &&
      std::any_of(compressed.get(), compressed.get() + slots.size(), [](bool c) { return c; });
  exchanger_.submit_task(
      [this, reducer, views = std::move(views), compressed, ctx, hooks = std::move(hooks),
       agree_finite] {
        std::optional<c10::StreamGuard> guard;
        if (hooks.stream) guard.emplace(*hooks.stream);
        if (hooks.before) hooks.before();
        if (agree_finite && dist::any_rank_non_finite(comm_, holds_non_finite(views))) {
          for (const at::Tensor& v : views) v.fill_(std::numeric_limits<float>::infinity());
          if (hooks.after) hooks.after();
          ReduceStats skipped;
          skipped.non_finite_skips = 1;
          return skipped;
        }
        reducer->reduce(views, std::span<const bool>(compressed.get(), views.size()), ctx);
        if (hooks.after) hooks.after();
        return reducer->take_stats();
      },
      ctx,
      [buffer, done = std::move(done)](std::exception_ptr error) {
        // The buffer stays alive until the job has completed.
        done(error);
      });
}

std::vector<std::pair<std::string, at::Tensor>> Groups::state(std::uint64_t key) {
  const auto it = groups_.find(key);
  if (it == groups_.end()) return {};
  return it->second.reducer->state();
}

void Groups::restore(std::uint64_t key, std::span<const Slot> slots, const at::Device& device,
                     const std::map<std::string, at::Tensor>& saved) {
  Reducer& reducer = group(key, slots, device);
  std::map<std::string, at::Tensor> live;
  for (const auto& [name, t] : reducer.state()) live.emplace(name, t);
  for (const auto& [name, tensor] : saved) {
    const auto it = live.find(name);
    if (it == live.end() || it->second.numel() != tensor.numel()) {
      throw InvalidArgument(
          "gradcomp state: the checkpoint's " + name + " (" + std::to_string(tensor.numel()) +
          " values) has no counterpart in " + reducer.describe() +
          (it == live.end() ? "" : " of " + std::to_string(it->second.numel()) + " values") +
          " (was it saved with another compressor or model?)");
    }
    it->second.copy_(tensor.reshape({-1}));
  }
}

std::string Groups::describe() const {
  return groups_.empty() ? std::string() : groups_.begin()->second.reducer->describe();
}

}  // namespace gradcomp::device
