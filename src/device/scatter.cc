// The scatter reducer (src/dist/scatter_reducer.cc) for gradients that live on a device:
// the same two phases, slots and frames (dist/scatter_frames.h), the memories and every
// encode and decode on the device, only compressed bytes crossing to the host.
//
// One step, every rank in the same order, as the host reducer's:
//   phase 1  every nonempty slice of every compressed bucket encoded in one batch, through
//            its memory (ef, efm or none: each bucket's memory a run of one flat tensor,
//            slice j of it slice j's memory); the payloads to the host in one copy, framed
//            into their slots. Uncompressed buckets to the host in one copy, their fp32
//            slices into their slots. Frame j sent to rank j;
//   owner    my slice's W messages of every compressed bucket opened on the host (framing,
//            checksum, codec, n), their payloads to the device in one copy, decoded into
//            the means in one batch (rank order, times 1/W); the means encoded in one batch
//            through the owner memories (ef, or none where the slices keep none); payloads
//            to the host in one copy, framed. Uncompressed buckets' slices summed on the
//            host, as the host reducer sums them. My frame sent to every rank;
//   phase 2  every owner's messages opened on the host, their payloads to the device in
//            one copy, each decoded into its slice of the bucket (zeroed first) in one
//            batch; the fp32 means to the device in one copy and into their buckets.
// On CPU tensors it writes what the host reducer writes, bit for bit, and sends the same
// bytes (tests/device/scatter_device_test.cc); on CUDA the device codecs are held to the
// CPU codecs by tests/python/test_device_codec.py on a GPU.
//
// reduce() waits for the device three times a step (each payloads' copy to the host) plus
// the codecs' own syncs, which a batch shares (codec.h: encode_batch, decode_batch).
#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "codecs/codecs.h"
#include "device/host_buffer.h"
#include "device/momentum.h"
#include "device/reducers.h"
#include "device/view_scatter.h"
#include "dist/scatter_frames.h"
#include "dist/step_recorder.h"
#include "gradcomp/device/codec.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/error.h"
#include "gradcomp/memory.h"
#include "gradcomp/wire.h"

namespace gradcomp::device {

namespace {

enum class SliceMemory { kNone, kErrorFeedback, kMomentum };

// The slices' memory, by what it calls itself: ef(...), efm(...), or the codec itself /
// noef(...) for none; anything else (dgc) does not run here.
bool memory_kind(const Method& method, SliceMemory* kind) {
  const std::string memory = method.make_memory(0)->spec();
  if (memory.starts_with("efm(")) {
    *kind = SliceMemory::kMomentum;
  } else if (memory.starts_with("ef(")) {
    *kind = SliceMemory::kErrorFeedback;
  } else if (memory.starts_with("noef(") || memory == method.codec()->spec()) {
    *kind = SliceMemory::kNone;
  } else {
    return false;
  }
  return true;
}

// Payloads cut from host memory, gathered into one host buffer for one copy to the device:
// the byte ranges as decode_batch takes them.
class PayloadUpload {
 public:
  explicit PayloadUpload(const at::Device& device) : host_(at::kByte, device) {}

  void clear() {
    pieces_.clear();
    offsets_.clear();
    bytes_.clear();
    total_ = 0;
  }
  void add(std::span<const std::byte> payload) {
    pieces_.push_back(payload);
    offsets_.push_back(total_);
    bytes_.push_back(static_cast<std::int64_t>(payload.size()));
    total_ += static_cast<std::int64_t>(payload.size());
  }
  // Every payload added, in one copy to `device`.
  at::Tensor upload(const at::Device& device) {
    const at::Tensor host = host_.take(total_);
    auto* dst = reinterpret_cast<std::byte*>(host.data_ptr<std::uint8_t>());
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
      if (!pieces_[i].empty()) std::memcpy(dst + offsets_[i], pieces_[i].data(), pieces_[i].size());
    }
    return host.to(device);
  }
  const std::vector<std::int64_t>& offsets() const { return offsets_; }
  const std::vector<std::int64_t>& bytes() const { return bytes_; }

 private:
  HostBuffer host_;
  std::vector<std::span<const std::byte>> pieces_;
  std::vector<std::int64_t> offsets_;
  std::vector<std::int64_t> bytes_;
  std::int64_t total_ = 0;
};

class DeviceScatterReducer final : public Reducer {
 public:
  DeviceScatterReducer(const Method& method, dist::Communicator& comm,
                       std::span<const BucketShape> shapes, const at::Device& device);

  void reduce(std::span<const at::Tensor> grads, std::span<const bool> compressed,
              const StepContext& ctx) override;
  ReduceStats take_stats() override { return std::exchange(stats_, {}); }
  // The host reducer's names and order: "bucket<id>.slice<j>.<momentum|residual>" for each
  // slice, then "bucket<id>.owner.residual".
  std::vector<std::pair<std::string, at::Tensor>> state() override;
  std::string describe() const override { return describe_; }

 private:
  struct Bucket {
    std::uint32_t id = 0;
    std::int64_t n = 0;
    bool in_flat = false;  // its memories are runs of the flat ones below
    at::Tensor residual;   // ef, efm: slice j's memory is its run j
    at::Tensor momentum;   // efm
    at::Tensor owner;      // the owned slice's residual (owner feedback)
  };

  // The memories `member` of `buckets` (ascending) back to back: the flat tensor itself when
  // they are all of it (the usual step), one bucket's own, else a copy that put_back writes
  // back.
  at::Tensor gathered(const std::vector<std::size_t>& buckets, at::Tensor Bucket::*member,
                      const at::Tensor& flat) const;
  void put_back(const std::vector<std::size_t>& buckets, at::Tensor Bucket::*member,
                const at::Tensor& flat, const at::Tensor& joined);
  bool covers_flat(const std::vector<std::size_t>& buckets, at::Tensor Bucket::*member,
                   const at::Tensor& flat) const;

  // One step's buckets: compressed ones with values, uncompressed ones with values, and
  // the latter's tensors and host copy (their fp32 values out, their means back).
  struct Step {
    std::vector<std::size_t> sent;
    std::vector<std::size_t> dense;
    std::vector<at::Tensor> dense_views;
    at::Tensor dense_host;
  };
  void write_slices(std::span<const at::Tensor> grads, const StepContext& ctx, Step& step);
  void reduce_owned_slices(const StepContext& ctx, const Step& step);
  void read_means(std::span<const at::Tensor> grads, const Step& step);

  DeviceCodec::EncodedBatch encode_slices(std::span<const at::Tensor> grads,
                                          const std::vector<std::size_t>& sent,
                                          const StepContext& ctx);
  // Frames payload i of `encoded` (for lengths[i] values) into slots[i], zero-padded.
  void frame_into(const DeviceCodec::EncodedBatch& encoded, std::span<const std::size_t> lengths,
                  std::span<const std::span<std::byte>> slots);

  SliceMemory memory_ = SliceMemory::kNone;
  bool owner_feedback_ = false;
  std::string describe_;
  std::shared_ptr<const Codec> codec_;
  std::unique_ptr<DeviceCodec> device_codec_;
  dist::Communicator& comm_;
  at::Device device_;
  dist::ScatterFrames frames_;
  std::vector<Bucket> buckets_;
  at::Tensor residual_flat_;
  at::Tensor momentum_flat_;
  at::Tensor owner_flat_;
  // What crosses PCIe (host_buffer.h: pinned on CUDA, reused across steps).
  HostBuffer payloads_host_;
  HostBuffer dense_host_;
  PayloadUpload upload_;
  ViewScatter dense_scatter_;
  std::vector<float> dense_mean_;
  ReduceStats stats_;
};

}  // namespace

bool scatter_runs(const Method& method) {
  if (method.is_scheme() || method.reducer() != ReducerKind::kScatter || !method.codec()) {
    return false;
  }
  const std::vector<std::string> names = device_codec_names();
  if (std::find(names.begin(), names.end(), method.codec()->name()) == names.end()) return false;
  SliceMemory kind;
  return memory_kind(method, &kind);
}

DeviceScatterReducer::DeviceScatterReducer(const Method& method, dist::Communicator& comm,
                                           std::span<const BucketShape> shapes,
                                           const at::Device& device)
    : describe_(dist::describe_reducer(method) + " on " + device.str()),
      codec_(method.codec()),
      comm_(comm),
      device_(device),
      frames_(comm, shapes, *codec_),
      payloads_host_(at::kByte, device),
      dense_host_(at::kFloat, device),
      upload_(device) {
  if (!scatter_runs(method)) {
    throw InvalidArgument("device reducer: " + method.canonical() +
                          " does not run on the device (a scatter of a device codec under " +
                          "ef, efm or noef does)");
  }
  memory_kind(method, &memory_);
  owner_feedback_ = !method.make_memory(1)->state().empty();
  device_codec_ = make_device_codec(*codec_);
  const auto floats = at::TensorOptions().dtype(at::kFloat).device(device);
  std::int64_t flat = 0;
  std::int64_t owned = 0;
  for (std::size_t b = 0; b < shapes.size(); ++b) {
    if (!shapes[b].compressible) continue;
    flat += static_cast<std::int64_t>(shapes[b].numel);
    owned += static_cast<std::int64_t>(frames_.mine(b));
  }
  const bool residuals = memory_ != SliceMemory::kNone;
  if (residuals) residual_flat_ = at::zeros({flat}, floats);
  if (memory_ == SliceMemory::kMomentum) momentum_flat_ = at::zeros({flat}, floats);
  if (owner_feedback_) owner_flat_ = at::zeros({owned}, floats);
  std::int64_t at = 0;
  std::int64_t at_owned = 0;
  std::size_t most_owned = 0;
  for (std::size_t b = 0; b < shapes.size(); ++b) {
    Bucket bk;
    bk.id = shapes[b].id;
    bk.n = static_cast<std::int64_t>(shapes[b].numel);
    const auto mine = static_cast<std::int64_t>(frames_.mine(b));
    most_owned = std::max(most_owned, frames_.mine(b));
    // Every bucket has its memories, the dense ones too, as the host reducer's do (their
    // states match name for name, so a checkpoint restores into either).
    if (shapes[b].compressible) {
      bk.in_flat = true;
      if (residuals) bk.residual = residual_flat_.narrow(0, at, bk.n);
      if (momentum_flat_.defined()) bk.momentum = momentum_flat_.narrow(0, at, bk.n);
      if (owner_feedback_) bk.owner = owner_flat_.narrow(0, at_owned, mine);
      at += bk.n;
      at_owned += mine;
    } else {
      if (residuals) bk.residual = at::zeros({bk.n}, floats);
      if (momentum_flat_.defined()) bk.momentum = at::zeros({bk.n}, floats);
      if (owner_feedback_) bk.owner = at::zeros({mine}, floats);
    }
    buckets_.push_back(std::move(bk));
  }
  dense_mean_.resize(most_owned);
}

std::vector<std::pair<std::string, at::Tensor>> DeviceScatterReducer::state() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bk = buckets_[b];
    const std::string prefix = "bucket" + std::to_string(bk.id) + ".";
    for (std::size_t j = 0; j < frames_.world(); ++j) {
      const std::string slice = prefix + "slice" + std::to_string(j) + ".";
      const auto begin = static_cast<std::int64_t>(frames_.slice_begin(b, j));
      const auto len = static_cast<std::int64_t>(frames_.slice_length(b, j));
      if (bk.momentum.defined())
        out.emplace_back(slice + "momentum", bk.momentum.narrow(0, begin, len));
      if (bk.residual.defined())
        out.emplace_back(slice + "residual", bk.residual.narrow(0, begin, len));
    }
    if (bk.owner.defined()) out.emplace_back(prefix + "owner.residual", bk.owner);
  }
  return out;
}

bool DeviceScatterReducer::covers_flat(const std::vector<std::size_t>& buckets,
                                       at::Tensor Bucket::*member, const at::Tensor& flat) const {
  std::int64_t values = 0;
  for (const std::size_t b : buckets) {
    if (!buckets_[b].in_flat) return false;
    values += (buckets_[b].*member).numel();
  }
  return values == flat.numel();  // the buckets are distinct and in order
}

at::Tensor DeviceScatterReducer::gathered(const std::vector<std::size_t>& buckets,
                                          at::Tensor Bucket::*member,
                                          const at::Tensor& flat) const {
  if (covers_flat(buckets, member, flat)) return flat;
  if (buckets.size() == 1) return buckets_[buckets.front()].*member;
  std::vector<at::Tensor> views;
  for (const std::size_t b : buckets) views.push_back(buckets_[b].*member);
  return at::cat(views);
}

void DeviceScatterReducer::put_back(const std::vector<std::size_t>& buckets,
                                    at::Tensor Bucket::*member, const at::Tensor& flat,
                                    const at::Tensor& joined) {
  if (covers_flat(buckets, member, flat) || buckets.size() == 1) return;  // written in place
  std::int64_t at = 0;
  for (const std::size_t b : buckets) {
    const at::Tensor& m = buckets_[b].*member;
    m.copy_(joined.narrow(0, at, m.numel()));
    at += m.numel();
  }
}

// Phase 1's payloads: slice after slice of each bucket sent, through the slices' memories.
DeviceCodec::EncodedBatch DeviceScatterReducer::encode_slices(std::span<const at::Tensor> grads,
                                                              const std::vector<std::size_t>& sent,
                                                              const StepContext& ctx) {
  std::vector<std::int64_t> sizes;
  std::vector<StepContext> contexts;
  std::vector<at::Tensor> parts;
  for (const std::size_t b : sent) {
    parts.push_back(grads[b]);
    for (std::size_t j = 0; j < frames_.world(); ++j) {
      const std::size_t len = frames_.slice_length(b, j);
      if (len == 0) continue;  // the empty slices are a bucket's last
      sizes.push_back(static_cast<std::int64_t>(len));
      contexts.push_back(dist::scatter_slice_context(ctx, buckets_[b].id, j, false, frames_.me(),
                                                     frames_.world()));
    }
  }
  const at::Tensor g = parts.size() == 1 ? parts.front() : at::cat(parts);
  if (memory_ == SliceMemory::kNone) {
    return device_codec_->encode_batch(g, sizes, contexts, /*feedback=*/false);
  }
  // The slices' memories are the buckets' runs, in the same order as g's.
  const at::Tensor e = gathered(sent, &Bucket::residual, residual_flat_);
  at::Tensor u;
  DeviceCodec::EncodedBatch out;
  if (memory_ == SliceMemory::kMomentum) {
    u = gathered(sent, &Bucket::momentum, momentum_flat_);
    accumulate_momentum(u, e, g, ctx);
    out = device_codec_->encode_batch(e, sizes, contexts, /*feedback=*/true);
    put_back(sent, &Bucket::momentum, momentum_flat_, u);
  } else {
    out = device_codec_->encode_batch_with_residual(g, e, sizes, contexts);
  }
  put_back(sent, &Bucket::residual, residual_flat_, e);
  return out;
}

void DeviceScatterReducer::frame_into(const DeviceCodec::EncodedBatch& encoded,
                                      std::span<const std::size_t> lengths,
                                      std::span<const std::span<std::byte>> slots) {
  const at::Tensor host = payloads_host_.take(encoded.payloads.numel());
  host.copy_(encoded.payloads);
  const auto* src = reinterpret_cast<const std::byte*>(host.data_ptr<std::uint8_t>());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const auto bytes = static_cast<std::size_t>(encoded.bytes[i]);
    const std::span<std::byte> slot = slots[i];
    if (kHeaderBytes + bytes > slot.size()) {
      throw InvalidArgument("device scatter reducer: a payload of " + std::to_string(bytes) +
                            " bytes overruns its slot of " + std::to_string(slot.size()));
    }
    if (bytes > 0) std::memcpy(slot.data() + kHeaderBytes, src, bytes);
    write_header(slot.first(kHeaderBytes + bytes), codec_->wire_id(), codec_->config_tag(),
                 lengths[i], bytes);
    std::fill(slot.begin() + static_cast<std::ptrdiff_t>(kHeaderBytes + bytes), slot.end(),
              std::byte{0});
    src += bytes;
  }
}

void DeviceScatterReducer::reduce(std::span<const at::Tensor> grads,
                                  std::span<const bool> compressed, const StepContext& ctx) {
  check_reduce_args("device reduce", grads, compressed, buckets_.size(),
                    [&](std::size_t b) { return buckets_[b].n; });
  dist::StepRecorder rec(comm_, stats_);
  frames_.layout(compressed);
  frames_.post_receives();
  Step step;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    if (buckets_[b].n == 0) continue;
    (compressed[b] ? step.sent : step.dense).push_back(b);
  }
  write_slices(grads, ctx, step);
  rec.encoded();
  frames_.send_slices();
  frames_.wait_slices();
  rec.communicated();
  reduce_owned_slices(ctx, step);
  rec.encoded();
  frames_.send_sums();
  frames_.wait_sums();
  rec.communicated();
  read_means(grads, step);
  rec.decoded();
  rec.finish();
}

// Phase 1: every slice of the compressed buckets encoded on the device and framed on the
// host; the uncompressed buckets' fp32 values copied over in one piece and cut into slots.
void DeviceScatterReducer::write_slices(std::span<const at::Tensor> grads, const StepContext& ctx,
                                        Step& step) {
  if (!step.sent.empty()) {
    const DeviceCodec::EncodedBatch encoded = encode_slices(grads, step.sent, ctx);
    std::vector<std::size_t> lengths;
    std::vector<std::span<std::byte>> slots;
    for (const std::size_t b : step.sent) {
      for (std::size_t j = 0; j < frames_.world(); ++j) {
        if (frames_.slice_length(b, j) == 0) continue;
        lengths.push_back(frames_.slice_length(b, j));
        slots.push_back(frames_.out_slot(b, j));
      }
    }
    frame_into(encoded, lengths, slots);
  }
  std::int64_t dense_total = 0;
  for (const std::size_t b : step.dense) {
    dense_total += buckets_[b].n;
    step.dense_views.push_back(grads[b]);
  }
  step.dense_host = dense_host_.take(dense_total);
  if (step.dense.empty()) return;
  step.dense_host.copy_(step.dense_views.size() == 1 ? step.dense_views.front()
                                                     : at::cat(step.dense_views));
  const float* src = step.dense_host.data_ptr<float>();
  for (const std::size_t b : step.dense) {
    for (std::size_t j = 0; j < frames_.world(); ++j) {
      const std::span<std::byte> slot = frames_.out_slot(b, j);
      if (!slot.empty()) std::memcpy(slot.data(), src + frames_.slice_begin(b, j), slot.size());
    }
    src += buckets_[b].n;
  }
}

// The owner's part: my slice's W messages of every compressed bucket decoded into their mean
// on the device (rank order, times 1/W), the means encoded there through the owner memories
// and framed; the uncompressed buckets' slices summed on the host.
void DeviceScatterReducer::reduce_owned_slices(const StepContext& ctx, const Step& step) {
  const std::size_t world = frames_.world();
  const std::size_t me = frames_.me();
  const float inv_w = 1.0f / static_cast<float>(world);
  std::vector<std::size_t> owned;  // compressed buckets with a slice of mine
  for (const std::size_t b : step.sent) {
    if (frames_.mine(b) > 0) owned.push_back(b);
  }
  if (!owned.empty()) {
    upload_.clear();
    for (std::size_t r = 0; r < world; ++r) {
      for (const std::size_t b : owned) {
        const std::span<const std::byte> msg =
            dist::message_in_slot(frames_.in_slot(r, b), static_cast<int>(r), buckets_[b].id);
        upload_.add(open_payload(msg, *codec_, frames_.mine(b)));
      }
    }
    const at::Tensor payloads = upload_.upload(device_);
    std::int64_t total = 0;
    for (const std::size_t b : owned) total += static_cast<std::int64_t>(frames_.mine(b));
    const at::Tensor means =
        at::empty({total}, at::TensorOptions().dtype(at::kFloat).device(device_));
    std::vector<at::Tensor> outs;
    std::vector<std::int64_t> sizes;
    std::vector<StepContext> contexts;
    std::int64_t at = 0;
    for (const std::size_t b : owned) {
      const auto mine = static_cast<std::int64_t>(frames_.mine(b));
      outs.push_back(means.narrow(0, at, mine));
      sizes.push_back(mine);
      contexts.push_back(dist::scatter_slice_context(ctx, buckets_[b].id, me, true, me, world));
      at += mine;
    }
    device_codec_->decode_batch(payloads, upload_.offsets(), upload_.bytes(), outs, inv_w);
    DeviceCodec::EncodedBatch encoded;
    if (owner_feedback_) {
      const at::Tensor e = gathered(owned, &Bucket::owner, owner_flat_);
      encoded = device_codec_->encode_batch_with_residual(means, e, sizes, contexts);
      put_back(owned, &Bucket::owner, owner_flat_, e);
    } else {
      encoded = device_codec_->encode_batch(means, sizes, contexts, /*feedback=*/false);
    }
    std::vector<std::size_t> lengths;
    std::vector<std::span<std::byte>> slots;
    for (const std::size_t b : owned) {
      lengths.push_back(frames_.mine(b));
      slots.push_back(frames_.own_sum_slot(b));
    }
    frame_into(encoded, lengths, slots);
  }
  for (const std::size_t b : step.dense) {
    frames_.sum_dense_slices(b, inv_w, std::span<float>(dense_mean_).first(frames_.mine(b)));
  }
}

// Phase 2: every slice decoded from its owner's message on the device (zeroed first); the
// dense means back in one copy and into their buckets.
void DeviceScatterReducer::read_means(std::span<const at::Tensor> grads, const Step& step) {
  if (!step.sent.empty()) {
    upload_.clear();
    std::vector<at::Tensor> outs;
    for (const std::size_t b : step.sent) {
      for (std::size_t j = 0; j < frames_.world(); ++j) {
        const std::size_t len = frames_.slice_length(b, j);
        if (len == 0) continue;
        const std::span<const std::byte> msg =
            dist::message_in_slot(frames_.sums_slot(j, b), static_cast<int>(j), buckets_[b].id);
        upload_.add(open_payload(msg, *codec_, len));
        outs.push_back(grads[b].narrow(0, static_cast<std::int64_t>(frames_.slice_begin(b, j)),
                                       static_cast<std::int64_t>(len)));
      }
    }
    const at::Tensor payloads = upload_.upload(device_);
    device_codec_->decode_batch(payloads, upload_.offsets(), upload_.bytes(), outs, 1.0f);
  }
  if (step.dense.empty()) return;
  float* dst = step.dense_host.data_ptr<float>();
  for (const std::size_t b : step.dense) {
    for (std::size_t j = 0; j < frames_.world(); ++j) {
      const std::span<const std::byte> slot = frames_.sums_slot(j, b);
      if (!slot.empty()) std::memcpy(dst + frames_.slice_begin(b, j), slot.data(), slot.size());
    }
    dst += buckets_[b].n;
  }
  dense_scatter_(step.dense_views, step.dense_host.to(device_));
}

std::unique_ptr<Reducer> make_scatter_reducer(const Method& method, dist::Communicator& comm,
                                              std::span<const BucketShape> shapes,
                                              const at::Device& device) {
  return std::make_unique<DeviceScatterReducer>(method, comm, shapes, device);
}

}  // namespace gradcomp::device
