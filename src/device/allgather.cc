// The allgather reducer (gradcomp/dist/reducers.h) for gradients that live on a device:
// only compressed bytes cross to the host.
//
// One step, every rank in the same order, as the host reducer's allgather mode:
//   encode   each compressed bucket's memory step on the device (error feedback, momentum
//            correction, DGC (dgc.cc) or none, memories kept on the device); the payloads
//            copied to the host in one piece and framed there (the CPU codec's messages,
//            byte for byte). Every copy across PCIe goes through a host buffer reused
//            across steps, pinned on CUDA (host_buffer.h);
//   pack     uncompressed buckets (and the dense fallback's) copied to one host fp32
//            buffer: the small tensors dense_share keeps out of compression;
//   comm     the fp32 allreduce, then the message allgather;
//   decode   dense slices * 1/W back to the device; the gathered messages copied to the
//            device in one piece and decoded there, grad = sum over ranks r = 0..W-1 of
//            decode(msg_r) / W in rank order, so every rank ends bit-identical.
// On CPU tensors it computes exactly what the host reducer does (tests hold it to that,
// bit for bit); on CUDA its device codecs are checked against the CPU codecs by
// tests/python/test_device_codec.py on a GPU.
//
// Batches. Where the codec batches (DeviceCodec::batches(): every device codec), the
// step's buckets are encoded together and their messages decoded together: the memories
// of the compressible buckets lie back to back in one tensor each, so that a step that
// compresses all of them runs each memory update as one pass, top-k's selection once for
// all (DGC's too, dgc.h: compress_batch), and every codec's host syncs once for all buckets
// (the decode's checks; the adaptive 2-bit threshold, fp16's and efsign's finiteness
// checks; DGC's clipping norms) instead of once a bucket (a step where some bucket falls
// back to dense gathers the memories of those sent).
// They run on CUDA tensors; GRADCOMP_DEVICE_BATCH=0 in the environment runs every step one
// bucket at a time there (the comparison a GPU run times), =1 batches CPU tensors too (the
// tests, which hold the batches to the one-at-a-time path and the host reducer).
//
// reduce() returns when the device work that writes the means is queued (it waits for the
// payloads' copy, and the codecs' own checks and top-k's selection sizes wait for the
// device too: one bucket at a time, about 0.84 ms a compressed bucket on an H200 with
// ResNet-50, docs/measurements/gpu.md; batched, those waits are a few a step).
#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "codecs/codecs.h"
#include "device/dgc.h"
#include "device/host_buffer.h"
#include "device/momentum.h"
#include "device/reducers.h"
#include "device/view_scatter.h"
#include "dist/step_recorder.h"
#include "gradcomp/advise/collectives.h"
#include "gradcomp/device/codec.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/error.h"
#include "gradcomp/memory.h"
#include "gradcomp/wire.h"

namespace gradcomp::device {

namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

class DeviceAllgatherReducer final : public Reducer {
 public:
  // Buckets of the given shapes, memories on `device`. InvalidArgument when
  // !allgather_runs(method).
  DeviceAllgatherReducer(const Method& method, dist::Communicator& comm,
                         std::span<const BucketShape> shapes, const at::Device& device);

  void reduce(std::span<const at::Tensor> grads, std::span<const bool> compressed,
              const StepContext& ctx) override;
  ReduceStats take_stats() override { return std::exchange(stats_, {}); }
  // "bucket<id>.<name>" as the host memories name theirs ("momentum", "residual"; DGC's
  // "momentum", "accumulator", "learning_rate").
  std::vector<std::pair<std::string, at::Tensor>> state() override;
  std::string describe() const override { return describe_; }

 private:
  struct Bucket {
    std::uint32_t id = 0;
    std::size_t n = 0;
    std::uint32_t rows = 0;
    bool in_flat = false;            // its memories are views of the flat ones below
    at::Tensor residual;             // ef, efm
    at::Tensor momentum;             // efm
    std::unique_ptr<DgcMemory> dgc;  // dgc
  };
  at::Tensor compress(Bucket& bucket, const at::Tensor& grad, const StepContext& ctx);
  // The payloads of the buckets `sent` (indices, ascending; contexts[j] for sent[j]).
  DeviceCodec::EncodedBatch encode(std::span<const at::Tensor> grads,
                                   const std::vector<std::size_t>& sent,
                                   const std::vector<StepContext>& contexts);
  void compress_dense(Bucket& bucket, const at::Tensor& grad, const StepContext& ctx);
  bool dense_is_cheaper(const Bucket& bucket, const StepContext& ctx) const;

  enum class MemoryKind { kNone, kErrorFeedback, kMomentum, kDgc };
  MemoryKind memory_;
  bool dense_fallback_;
  std::string describe_;
  std::shared_ptr<const Codec> codec_;
  std::unique_ptr<DeviceCodec> device_codec_;
  bool batched_ = false;  // the codec batches, on CUDA or switched on
  dist::Communicator& comm_;
  std::vector<Bucket> buckets_;
  // The compressible buckets' memories back to back, so that a batch reads them in place:
  // ef's and efm's residuals, efm's and DGC's momenta, DGC's accumulators (their
  // Bucket::residual / momentum, DgcMemory's tensors, are views of these).
  at::Tensor residual_flat_;
  at::Tensor momentum_flat_;
  at::Tensor accumulator_flat_;
  std::size_t compressible_ = 0;
  std::vector<std::byte> send_;
  std::vector<std::byte> gathered_;
  std::vector<std::size_t> offsets_;
  std::vector<std::span<const std::byte>> spans_;
  // What crosses PCIe (host_buffer.h: pinned on CUDA, reused across steps): the payloads
  // to the host, the dense buckets both ways, the gathered messages to the device.
  HostBuffer payloads_host_;
  HostBuffer dense_host_;
  HostBuffer gathered_host_;
  ViewScatter dense_scatter_;
  ReduceStats stats_;
};

}  // namespace

bool allgather_runs(const Method& method) {
  if (method.is_scheme() || method.reducer() != ReducerKind::kAllgather || !method.codec()) {
    return false;
  }
  const std::vector<std::string> names = device_codec_names();
  if (std::find(names.begin(), names.end(), method.codec()->name()) == names.end()) return false;
  // The memory, by what it calls itself (a memory of no elements allocates nothing):
  // ef(...), efm(...), dgc:..., or the codec itself / noef(...) for none. (DGC's message
  // codec is topk's, which has a device codec.)
  const std::string memory = method.make_memory(0)->spec();
  return starts_with(memory, "ef(") || starts_with(memory, "efm(") || starts_with(memory, "dgc:") ||
         starts_with(memory, "noef(") || memory == method.codec()->spec();
}

DeviceAllgatherReducer::DeviceAllgatherReducer(const Method& method, dist::Communicator& comm,
                                               std::span<const BucketShape> shapes,
                                               const at::Device& device)
    : dense_fallback_(method.dense_fallback()),
      describe_("allgather(" + method.canonical() + ") on " + device.str()),
      codec_(method.codec()),
      comm_(comm),
      payloads_host_(at::kByte, device),
      dense_host_(at::kFloat, device),
      gathered_host_(at::kByte, device) {
  if (!allgather_runs(method)) {
    throw InvalidArgument("device reducer: " + method.canonical() +
                          " does not run on the device (an allgather of " +
                          "a device codec under ef, efm or noef, or of dgc, does)");
  }
  device_codec_ = make_device_codec(*codec_);
  const std::string memory = method.make_memory(0)->spec();
  memory_ = starts_with(memory, "efm(")   ? MemoryKind::kMomentum
            : starts_with(memory, "ef(")  ? MemoryKind::kErrorFeedback
            : starts_with(memory, "dgc:") ? MemoryKind::kDgc
                                          : MemoryKind::kNone;
  const detail::DgcOptions dgc = memory_ == MemoryKind::kDgc
                                     ? detail::DgcOptions::from(method.memory_params())
                                     : detail::DgcOptions{};
  batched_ = batches_on(device) && device_codec_->batches();
  const auto floats = at::TensorOptions().dtype(at::kFloat).device(device);
  const bool residuals = memory_ == MemoryKind::kErrorFeedback || memory_ == MemoryKind::kMomentum;
  std::int64_t flat = 0;
  for (const BucketShape& s : shapes) {
    if (s.compressible) {
      ++compressible_;
      flat += static_cast<std::int64_t>(s.numel);
    }
  }
  if (residuals) residual_flat_ = at::zeros({flat}, floats);
  if (memory_ == MemoryKind::kDgc) accumulator_flat_ = at::zeros({flat}, floats);
  if (memory_ == MemoryKind::kMomentum || (memory_ == MemoryKind::kDgc && dgc.correction)) {
    momentum_flat_ = at::zeros({flat}, floats);
  }
  std::int64_t at = 0;
  for (const BucketShape& s : shapes) {
    Bucket b;
    b.id = s.id;
    b.n = s.numel;
    b.rows = static_cast<std::uint32_t>(s.rows);
    const auto n = static_cast<std::int64_t>(s.numel);
    // Every bucket has its memory, the dense ones too, as the host reducer's do (their
    // states match name for name, so a checkpoint restores into either).
    if (memory_ == MemoryKind::kDgc && s.compressible) {
      b.in_flat = true;
      b.dgc = std::make_unique<DgcMemory>(
          dgc, momentum_flat_.defined() ? momentum_flat_.narrow(0, at, n) : at::Tensor(),
          accumulator_flat_.narrow(0, at, n));
      at += n;
    } else if (memory_ == MemoryKind::kDgc) {
      b.dgc = std::make_unique<DgcMemory>(dgc, s.numel, floats);
    } else if (residuals && s.compressible) {
      b.in_flat = true;
      b.residual = residual_flat_.narrow(0, at, n);
      if (memory_ == MemoryKind::kMomentum) b.momentum = momentum_flat_.narrow(0, at, n);
      at += n;
    } else if (residuals) {
      b.residual = at::zeros({n}, floats);
      if (memory_ == MemoryKind::kMomentum) b.momentum = at::zeros_like(b.residual);
    }
    buckets_.push_back(std::move(b));
  }
}

std::vector<std::pair<std::string, at::Tensor>> DeviceAllgatherReducer::state() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (Bucket& b : buckets_) {
    const std::string prefix = "bucket" + std::to_string(b.id) + ".";
    if (b.dgc) b.dgc->append_state(prefix, out);
    if (b.momentum.defined()) out.emplace_back(prefix + "momentum", b.momentum);
    if (b.residual.defined()) out.emplace_back(prefix + "residual", b.residual);
  }
  return out;
}

at::Tensor DeviceAllgatherReducer::compress(Bucket& bucket, const at::Tensor& grad,
                                            const StepContext& ctx) {
  switch (memory_) {
    case MemoryKind::kNone:
      return device_codec_->encode_payload(grad, ctx);
    case MemoryKind::kErrorFeedback:
      return device_codec_->encode_payload_with_residual(grad, bucket.residual, ctx);
    case MemoryKind::kMomentum:
      accumulate_momentum(bucket.momentum, bucket.residual, grad, ctx);
      return device_codec_->encode_payload_feedback(bucket.residual, ctx);
    case MemoryKind::kDgc:
      return bucket.dgc->compress(grad, ctx);
  }
  return {};
}

DeviceCodec::EncodedBatch DeviceAllgatherReducer::encode(std::span<const at::Tensor> grads,
                                                         const std::vector<std::size_t>& sent,
                                                         const std::vector<StepContext>& contexts) {
  if (batched_) {
    std::vector<std::int64_t> sizes;
    std::vector<at::Tensor> parts;
    for (const std::size_t b : sent) {
      sizes.push_back(static_cast<std::int64_t>(buckets_[b].n));
      parts.push_back(grads[b]);
    }
    // The memories of the buckets sent, back to back: the flat ones themselves where every
    // compressible bucket is sent (the usual step), else gathered and written back after.
    std::size_t flat_sent = 0;
    for (const std::size_t b : sent) flat_sent += buckets_[b].in_flat ? 1 : 0;
    const bool every = flat_sent == sent.size() && flat_sent == compressible_;
    if (memory_ == MemoryKind::kDgc) {  // accumulates bucket by bucket: no joined gradient
      std::vector<DgcMemory*> memories;
      for (const std::size_t b : sent) memories.push_back(buckets_[b].dgc.get());
      return DgcMemory::compress_batch(memories, parts, contexts,
                                       every ? momentum_flat_ : at::Tensor(),
                                       every ? accumulator_flat_ : at::Tensor());
    }
    const at::Tensor g = at::cat(parts);
    if (memory_ == MemoryKind::kNone) {
      return device_codec_->encode_batch(g, sizes, contexts, /*feedback=*/false);
    }
    const auto gathered = [&](at::Tensor Bucket::*memory, const at::Tensor& flat) {
      if (every) return flat;
      std::vector<at::Tensor> views;
      for (const std::size_t b : sent) views.push_back(buckets_[b].*memory);
      return at::cat(views);
    };
    const at::Tensor e = gathered(&Bucket::residual, residual_flat_);
    at::Tensor u;
    DeviceCodec::EncodedBatch out;
    if (memory_ == MemoryKind::kMomentum) {
      u = gathered(&Bucket::momentum, momentum_flat_);
      accumulate_momentum(u, e, g, contexts.front());
      out = device_codec_->encode_batch(e, sizes, contexts, /*feedback=*/true);
    } else {
      out = device_codec_->encode_batch_with_residual(g, e, sizes, contexts);
    }
    if (!every) {
      std::int64_t at = 0;
      for (const std::size_t b : sent) {
        const auto n = static_cast<std::int64_t>(buckets_[b].n);
        buckets_[b].residual.copy_(e.narrow(0, at, n));
        if (u.defined()) buckets_[b].momentum.copy_(u.narrow(0, at, n));
        at += n;
      }
    }
    return out;
  }
  DeviceCodec::EncodedBatch out;
  std::vector<at::Tensor> payloads;
  for (std::size_t j = 0; j < sent.size(); ++j) {
    payloads.push_back(compress(buckets_[sent[j]], grads[sent[j]], contexts[j]));
    out.bytes.push_back(payloads.back().numel());
  }
  out.payloads = at::cat(payloads);
  return out;
}

// Memory::compress_dense: the step as if everything were sent exactly; grad receives it.
void DeviceAllgatherReducer::compress_dense(Bucket& bucket, const at::Tensor& grad,
                                            const StepContext& ctx) {
  switch (memory_) {
    case MemoryKind::kNone:
      return;
    case MemoryKind::kErrorFeedback:
      grad.copy_(at::add(bucket.residual, grad));
      bucket.residual.zero_();
      return;
    case MemoryKind::kMomentum:
      accumulate_momentum(bucket.momentum, bucket.residual, grad, ctx);
      grad.copy_(bucket.residual);
      bucket.residual.zero_();
      return;
    case MemoryKind::kDgc:
      bucket.dgc->compress_dense(grad, ctx);
      return;
  }
}

// The host reducer's rule (reducers.cc, dense_is_cheaper), with these memories' bounds
// (Memory::step_planned_encoded_bytes).
bool DeviceAllgatherReducer::dense_is_cheaper(const Bucket& bucket, const StepContext& ctx) const {
  const int w = comm_.world_size();
  if (w < 2) return false;
  const std::size_t bound = bucket.dgc ? bucket.dgc->step_max_encoded_bytes(*codec_, ctx)
                                       : codec_->max_encoded_bytes(bucket.n);
  const std::size_t planned = std::min(bound, codec_->planned_encoded_bytes(bucket.n, ctx));
  return advise::allgather_bytes(static_cast<double>(planned), w) >
         advise::allreduce_bytes(4.0 * static_cast<double>(bucket.n), w);
}

void DeviceAllgatherReducer::reduce(std::span<const at::Tensor> grads,
                                    std::span<const bool> compressed, const StepContext& ctx) {
  check_reduce_args("device reduce", grads, compressed, buckets_.size(),
                    [&](std::size_t b) { return buckets_[b].n; });
  dist::StepRecorder rec(comm_, stats_);
  const float inv_w = 1.0f / static_cast<float>(comm_.world_size());

  // ---- encode on the device; payloads to the host, framed
  std::vector<char> dense_now(buckets_.size(), 0);
  std::vector<std::size_t> sent;
  std::vector<StepContext> contexts;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bk = buckets_[b];
    if (!compressed[b]) {
      dense_now[b] = 1;
      continue;
    }
    StepContext c = ctx;
    c.rank = static_cast<std::uint32_t>(comm_.rank());
    c.world = static_cast<std::uint32_t>(comm_.world_size());
    c.bucket = bk.id;
    c.rows = bk.rows;
    if (dense_fallback_ && dense_is_cheaper(bk, c)) {
      compress_dense(bk, grads[b], c);
      dense_now[b] = 1;
      ++stats_.dense_fallbacks;
      continue;
    }
    sent.push_back(b);
    contexts.push_back(c);
  }
  const std::size_t n_messages = sent.size();
  std::size_t send_len = 0;
  // Every payload crosses in one copy (one wait for the device), then each is framed.
  if (!sent.empty()) {
    const DeviceCodec::EncodedBatch encoded = encode(grads, sent, contexts);
    const at::Tensor host = payloads_host_.take(encoded.payloads.numel());
    host.copy_(encoded.payloads);
    const auto* src = reinterpret_cast<const std::byte*>(host.data_ptr<std::uint8_t>());
    for (std::size_t j = 0; j < sent.size(); ++j) {
      const auto bytes = static_cast<std::size_t>(encoded.bytes[j]);
      send_.resize(std::max(send_.size(), send_len + kHeaderBytes + bytes));
      const std::span<std::byte> msg(send_.data() + send_len, kHeaderBytes + bytes);
      if (bytes > 0) std::memcpy(msg.data() + kHeaderBytes, src, bytes);
      write_header(msg, codec_->wire_id(), codec_->config_tag(), buckets_[sent[j]].n, bytes);
      src += bytes;
      send_len += msg.size();
    }
  }
  rec.encoded();

  // ---- pack the dense buckets on the host: one copy for all of them (they are many and
  // small: biases, normalisation layers)
  std::size_t dense_total = 0;
  std::vector<at::Tensor> dense_views;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    if (!dense_now[b]) continue;
    dense_total += buckets_[b].n;
    dense_views.push_back(grads[b]);
  }
  const at::Tensor dense_host = dense_host_.take(static_cast<std::int64_t>(dense_total));
  const std::span<float> dense(dense_host.data_ptr<float>(), dense_total);
  if (!dense_views.empty()) dense_host.copy_(at::cat(dense_views));
  const bool all_dense = n_messages == 0 && dense_total == [&] {
    std::size_t all = 0;
    for (const Bucket& bk : buckets_) all += bk.n;
    return all;
  }();

  // ---- communicate: the host reducer's collectives, in its order (an all-dense step is
  // its one in-place allreduce)
  comm_.allreduce_sum(dense);
  if (!all_dense) {
    comm_.allreduce_sum_f16({});
    comm_.allgather_bytes(std::span<const std::byte>(send_.data(), send_len), gathered_, offsets_);
  }
  rec.communicated();

  // ---- the dense means back to the device, in one copy, and into their buckets
  if (!dense_views.empty()) {
    for (float& x : dense) x *= inv_w;
    dense_scatter_(dense_views, dense_host.to(grads.front().device()));
  }

  // ---- decode the gathered messages on the device, in rank order
  if (!all_dense && n_messages > 0) {
    const auto w = static_cast<std::size_t>(comm_.world_size());
    dist::split_gathered(gathered_, offsets_, w, n_messages, spans_);
    const at::Tensor gathered_host =
        gathered_host_.take(static_cast<std::int64_t>(gathered_.size()));
    std::memcpy(gathered_host.data_ptr<std::uint8_t>(), gathered_.data(), gathered_.size());
    const at::Tensor on_device = gathered_host.to(grads.front().device());
    // Payload (r, j) of bucket sent[j], opened (framing, checksum, codec, n) bucket after
    // bucket, as the one-at-a-time decode opens them.
    std::vector<std::int64_t> positions(w * n_messages);
    std::vector<std::int64_t> lengths(w * n_messages);
    std::vector<at::Tensor> outs;
    for (std::size_t j = 0; j < n_messages; ++j) {
      outs.push_back(grads[sent[j]]);
      for (std::size_t r = 0; r < w; ++r) {
        const std::span<const std::byte> payload =
            open_payload(spans_[r * n_messages + j], *codec_, buckets_[sent[j]].n);
        positions[r * n_messages + j] =
            static_cast<std::int64_t>(payload.data() - gathered_.data());
        lengths[r * n_messages + j] = static_cast<std::int64_t>(payload.size());
      }
    }
    if (batched_) {
      device_codec_->decode_batch(on_device, positions, lengths, outs, inv_w);
    } else {
      for (std::size_t j = 0; j < n_messages; ++j) {
        outs[j].zero_();
        for (std::size_t r = 0; r < w; ++r) {
          const std::size_t i = r * n_messages + j;
          device_codec_->decode_payload_add(on_device.narrow(0, positions[i], lengths[i]), outs[j],
                                            inv_w);
        }
      }
    }
  }
  rec.decoded();
  rec.finish();
}

std::unique_ptr<Reducer> make_allgather_reducer(const Method& method, dist::Communicator& comm,
                                                std::span<const BucketShape> shapes,
                                                const at::Device& device) {
  return std::make_unique<DeviceAllgatherReducer>(method, comm, shapes, device);
}

}  // namespace gradcomp::device
