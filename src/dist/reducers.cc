// The dense, allreduce and allgather reducers (see gradcomp/dist/reducers.h): one class,
// three modes, sharing the fused dense allreduce. No c10d here: everything goes through
// the Communicator.
//
// One step (every rank, same order):
//   encode   compressed buckets: Memory::compress into this bucket's message buffer
//            (allreduce mode) or appended to this rank's send buffer (allgather mode),
//            StepContext {seed, step, rank, bucket id};
//   pack     uncompressed buckets and fp32/bf16 linear regions into one fp32 buffer,
//            fp16 linear regions into one u16 buffer;
//   comm     allreduce fp32, allreduce fp16, then (allgather mode) the message allgather;
//   fallback (allgather mode) a compressed bucket whose message at this step would cost
//            more bytes gathered, (W-1) m, than the dense allreduce's 2(W-1)/W * 4n
//            goes into the fp32 allreduce instead, through Memory::compress_dense (its
//            memory sends everything it holds): no spec makes a step dearer than none;
//   decode   dense slices * 1/W back into their buckets; summed regions back into the
//            messages, then grad = decode(summed message) / W; gathered messages: grad =
//            sum over ranks r = 0..W-1 of decode(msg_r) / W, in rank order on every rank,
//            so every rank ends with bit-identical buckets.
// Buffers are sized at construction (the gather buffer grows to its high-water mark),
// so a steady-state step allocates nothing in gradcomp (c10d allocates its work objects).
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "dense_packing.h"
#include "gradcomp/advise/collectives.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/dist/schemes.h"
#include "gradcomp/error.h"
#include "gradcomp/kernels/half.h"
#include "gradcomp/wire.h"
#include "scatter_reducer.h"
#include "step_recorder.h"

namespace gradcomp::dist {

namespace {

std::size_t dtype_bytes(WireDType d) { return d == WireDType::kFloat32 ? 4 : 2; }

enum class Mode { kDense, kAllreduce, kAllgather };

// Every rank's encoder writes finite fp16 values, at most 65504 in magnitude, but their sum
// can still overflow (the values of a diverging run). Named as such here, before the
// decode would refuse the infinity as a corrupt message.
void check_f16_sum(std::span<const std::uint16_t> sum, std::uint32_t bucket) {
  constexpr std::uint16_t kExponent = 0x7C00;  // all ones: inf or NaN
  bool overflowed = false;
  for (const std::uint16_t x : sum) overflowed |= (x & kExponent) == kExponent;
  if (!overflowed) return;
  std::size_t i = 0;
  while ((sum[i] & kExponent) != kExponent) ++i;
  throw Error("allreduce: bucket " + std::to_string(bucket) +
              ": the ranks' fp16 values summed past fp16's range (65504) at value " +
              std::to_string(i) +
              " of the sum: a diverging run, or values too large for fp16 (fp16:format=bf16 has "
              "fp32's range)");
}

class FusedReducer final : public Reducer {
 public:
  // dense_fallback: with kAllgather, send a bucket dense for a step where its gathered
  // message would cost more bytes (dense_is_cheaper).
  FusedReducer(Mode mode, const Method& method, Communicator& comm,
               std::span<const BucketShape> shapes)
      : mode_(mode),
        dense_fallback_(method.dense_fallback() && mode == Mode::kAllgather),
        comm_(comm) {
    for (const BucketShape& s : shapes) {
      ids_.push_back(s.id);
      sizes_.push_back(s.numel);
      rows_.push_back(static_cast<std::uint32_t>(s.rows));
    }
    std::size_t dense_cap = 0;
    for (std::size_t n : sizes_) dense_cap += n;
    if (mode_ == Mode::kDense) {
      describe_ = describe_reducer(method);
      packing_ = DensePacking(dense_cap);
      return;
    }
    codec_ = method.codec();
    describe_ = describe_reducer(method);
    std::size_t cap32 = dense_cap;
    std::size_t cap16 = 0;
    std::size_t send_cap = 0;
    memories_.reserve(sizes_.size());
    for (std::size_t n : sizes_) {
      memories_.push_back(method.make_memory(n));
      const std::size_t max_bytes = memories_.back()->max_encoded_bytes();
      if (mode_ == Mode::kAllreduce) {
        const LinearRegion r = codec_->linear_region(n);
        if (r.offset + r.count * dtype_bytes(r.dtype) > max_bytes) {
          throw InvalidArgument("allreduce reducer: " + codec_->spec() +
                                " linear region ends past its message for n " + std::to_string(n));
        }
        regions_.push_back(r);
        (r.dtype == WireDType::kFloat16 ? cap16 : cap32) += r.count;
        messages_.emplace_back(max_bytes);
      } else {
        send_cap += max_bytes;
      }
    }
    packing_ = DensePacking(cap32);
    summed32_.resize(sizes_.size());
    fused16_.resize(cap16);
    send_.resize(send_cap);
    message_lengths_.resize(sizes_.size());
  }

  void reduce(std::span<const BucketRef> buckets, const StepContext& ctx) override {
    check_buckets(buckets);
    StepRecorder rec(comm_, stats_);
    const float inv_w = 1.0f / static_cast<float>(comm_.world_size());

    // ---- encode
    std::size_t send_len = 0;
    std::size_t n_messages = 0;
    dense_now_.resize(buckets.size());
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      dense_now_[b] = mode_ == Mode::kDense || !buckets[b].compressed;
    }
    if (mode_ != Mode::kDense) {
      for (std::size_t b = 0; b < buckets.size(); ++b) {
        const BucketRef& bk = buckets[b];
        if (!bk.compressed) continue;
        StepContext c = ctx;
        c.rank = static_cast<std::uint32_t>(comm_.rank());
        c.world = static_cast<std::uint32_t>(comm_.world_size());
        c.bucket = bk.id;
        c.rows = rows_[b];
        if (dense_fallback_ && dense_is_cheaper(b, c)) {
          memories_[b]->compress_dense(bk.grad, c, bk.grad);
          dense_now_[b] = 1;
          ++stats_.dense_fallbacks;
          continue;
        }
        if (mode_ == Mode::kAllreduce) {
          message_lengths_[b] = memories_[b]->compress(bk.grad, c, messages_[b]);
          const LinearRegion& r = regions_[b];
          if (r.offset + r.count * dtype_bytes(r.dtype) > message_lengths_[b]) {
            throw InvalidArgument("allreduce reducer: bucket " + std::to_string(bk.id) +
                                  " message of " + std::to_string(message_lengths_[b]) +
                                  " bytes is shorter than its linear region");
          }
        } else {
          send_len +=
              memories_[b]->compress(bk.grad, c, std::span<std::byte>(send_).subspan(send_len));
        }
        ++n_messages;
      }
    }
    rec.encoded();

    // ---- pack: dense buckets and fp32 (and widened bf16) regions in the fp32 sum, fp16
    // regions in the fp16 one
    packing_.begin(buckets.size());
    std::size_t n16 = 0;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const BucketRef& bk = buckets[b];
      if (dense_now_[b]) {
        packing_.add_dense(bk.grad);
      } else if (mode_ == Mode::kAllreduce) {
        const LinearRegion& r = regions_[b];
        const std::byte* src = messages_[b].data() + r.offset;
        if (r.dtype == WireDType::kFloat32) {
          summed32_[b] = packing_.add_summed(r.count);
          if (r.count > 0) std::memcpy(summed32_[b].data(), src, 4 * r.count);
        } else if (r.dtype == WireDType::kBFloat16) {
          summed32_[b] = packing_.add_summed(r.count);
          for (std::size_t i = 0; i < r.count; ++i) {
            summed32_[b][i] = kernels::bf16_to_float_ref(load_le<std::uint16_t>(src + 2 * i));
          }
        } else {
          if (r.count > 0) std::memcpy(fused16_.data() + n16, src, 2 * r.count);
          n16 += r.count;
        }
      }
    }

    // ---- every bucket dense and back to back (GradientExchange's layout): summed where
    // they are, without the packing copy (and its pass over the gradient)
    if (packing_.in_place()) {
      comm_.allreduce_sum(packing_.pack());
      rec.communicated();
      packing_.write_means(inv_w);
      rec.decoded();
      rec.finish();
      return;
    }

    // ---- communicate
    comm_.allreduce_sum(packing_.pack());
    comm_.allreduce_sum_f16(std::span<std::uint16_t>(fused16_.data(), n16));
    if (mode_ == Mode::kAllgather) {
      comm_.allgather_bytes(std::span<const std::byte>(send_.data(), send_len), gathered_,
                            offsets_);
    }
    rec.communicated();

    // ---- unpack + decode
    packing_.write_means(inv_w);
    n16 = 0;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const BucketRef& bk = buckets[b];
      if (dense_now_[b] || mode_ != Mode::kAllreduce) continue;
      const LinearRegion& r = regions_[b];
      std::byte* dst = messages_[b].data() + r.offset;
      if (r.dtype == WireDType::kFloat32) {
        if (r.count > 0) std::memcpy(dst, summed32_[b].data(), 4 * r.count);
      } else if (r.dtype == WireDType::kBFloat16) {
        for (std::size_t i = 0; i < r.count; ++i) {
          store_le<std::uint16_t>(dst + 2 * i, kernels::float_to_bf16_ref(summed32_[b][i]));
        }
      } else {
        const std::span<const std::uint16_t> sum(fused16_.data() + n16, r.count);
        check_f16_sum(sum, bk.id);
        if (r.count > 0) std::memcpy(dst, sum.data(), 2 * r.count);
        n16 += r.count;
      }
      // The message now holds the sum of every rank's region, so the checksum this
      // rank wrote no longer matches it: reseal before decoding. This checks nothing
      // away: the message itself never left this rank (only the region travelled,
      // as the floats of a dense allreduce, which carry no per-message checksum in
      // any mode), and a CRC cannot follow the sum (CRC is linear over XOR, not over
      // float addition), so no rank-side checksum could have covered the summed
      // bytes. Resealing keeps one decode path, with verification, for every mode.
      const std::span<std::byte> summed(messages_[b].data(), message_lengths_[b]);
      reseal_message(summed);
      std::fill(bk.grad.begin(), bk.grad.end(), 0.0f);
      codec_->decode_add(summed, bk.grad, inv_w);
    }
    if (mode_ == Mode::kAllgather && n_messages > 0) decode_gathered(buckets, n_messages, inv_w);
    rec.decoded();

    rec.finish();
  }

  ReduceStats take_stats() override { return std::exchange(stats_, {}); }

  // Named "bucket<id>.<memory's name>", as the schemes name theirs: a tensor's state can
  // follow it into another grouping (the DDP hook's buckets are rebuilt after step 0).
  std::vector<StateBuffer> state() override {
    std::vector<StateBuffer> out;
    for (std::size_t b = 0; b < memories_.size(); ++b) {
      const std::string prefix = "bucket" + std::to_string(ids_[b]) + ".";
      for (auto& s : memories_[b]->state()) out.push_back({prefix + s.name, s.data});
    }
    return out;
  }

  std::string describe() const override { return describe_; }

  bool dense_only() const override { return mode_ == Mode::kDense; }

  bool momentum_in_memory() const override {
    return !memories_.empty() && memories_.front()->carries_momentum();
  }

 private:
  void check_buckets(std::span<const BucketRef> buckets) const {
    if (buckets.size() != sizes_.size()) {
      throw InvalidArgument("reduce: " + std::to_string(buckets.size()) +
                            " buckets, reducer built for " + std::to_string(sizes_.size()));
    }
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      if (buckets[b].grad.size() != sizes_[b]) {
        throw InvalidArgument("reduce: bucket " + std::to_string(b) + " has " +
                              std::to_string(buckets[b].grad.size()) + " elements, expected " +
                              std::to_string(sizes_[b]));
      }
    }
  }

  // Whether bucket b's message at this step, gathered from every rank, would put more
  // bytes on this rank's wire than the bucket in the dense fp32 ring allreduce (the
  // cost model's byte counts, gradcomp/advise/collectives.h). The planned size is a
  // function of the spec, the bucket's size and shape and the step, so every rank
  // decides alike.
  bool dense_is_cheaper(std::size_t b, const StepContext& c) const {
    const int w = comm_.world_size();
    if (w < 2) return false;
    const double gathered = advise::allgather_bytes(
        static_cast<double>(memories_[b]->step_planned_encoded_bytes(c)), w);
    const double dense = advise::allreduce_bytes(4.0 * static_cast<double>(sizes_[b]), w);
    return gathered > dense;
  }

  // Splits each rank's segment into its n_messages messages (framing checked here,
  // contents by decode_add), then decodes bucket by bucket in rank order.
  void decode_gathered(std::span<const BucketRef> buckets, std::size_t n_messages, float inv_w) {
    const auto w = static_cast<std::size_t>(comm_.world_size());
    split_gathered(gathered_, offsets_, w, n_messages, spans_);
    std::size_t j = 0;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const BucketRef& bk = buckets[b];
      if (dense_now_[b]) continue;
      std::fill(bk.grad.begin(), bk.grad.end(), 0.0f);
      for (std::size_t r = 0; r < w; ++r)
        codec_->decode_add(spans_[r * n_messages + j], bk.grad, inv_w);
      ++j;
    }
  }

  Mode mode_;
  bool dense_fallback_;
  Communicator& comm_;
  std::vector<std::uint32_t> ids_;
  std::vector<std::size_t> sizes_;
  std::vector<std::uint32_t> rows_;
  std::string describe_;
  std::shared_ptr<const Codec> codec_;
  std::vector<std::unique_ptr<Memory>> memories_;  // one per bucket (none when dense)
  std::vector<LinearRegion> regions_;              // allreduce: per bucket
  std::vector<std::vector<std::byte>> messages_;   // allreduce: per bucket
  std::vector<std::size_t> message_lengths_;
  std::vector<char> dense_now_;             // per bucket, this step: in the fp32 allreduce
  DensePacking packing_;                    // the fp32 allreduce
  std::vector<std::span<float>> summed32_;  // allreduce: per bucket, its fp32 region's slot
  std::vector<std::uint16_t> fused16_;
  std::vector<std::byte> send_;      // allgather: this rank's messages, back to back
  std::vector<std::byte> gathered_;  // allgather: every rank's, compacted
  std::vector<std::size_t> offsets_;
  std::vector<std::span<const std::byte>> spans_;
  ReduceStats stats_;
};

}  // namespace

void split_gathered(std::span<const std::byte> gathered, std::span<const std::size_t> offsets,
                    std::size_t world, std::size_t n_messages,
                    std::vector<std::span<const std::byte>>& out) {
  out.resize(world * n_messages);
  for (std::size_t r = 0; r < world; ++r) {
    std::size_t pos = offsets[r];
    const std::size_t end = offsets[r + 1];
    for (std::size_t j = 0; j < n_messages; ++j) {
      if (end - pos < kHeaderBytes) {
        throw CorruptMessage("allgather reducer: rank " + std::to_string(r) + " message " +
                             std::to_string(j) + " truncated: " + std::to_string(end - pos) +
                             " bytes < header " + std::to_string(kHeaderBytes));
      }
      const std::size_t payload = load_le<std::uint32_t>(gathered.data() + pos + 16);
      if (end - pos - kHeaderBytes < payload) {
        throw CorruptMessage("allgather reducer: rank " + std::to_string(r) + " message " +
                             std::to_string(j) + " payload " + std::to_string(payload) +
                             " bytes > " + std::to_string(end - pos - kHeaderBytes) + " left");
      }
      out[r * n_messages + j] = {gathered.data() + pos, kHeaderBytes + payload};
      pos += kHeaderBytes + payload;
    }
    if (pos != end) {
      throw CorruptMessage("allgather reducer: rank " + std::to_string(r) + " sent " +
                           std::to_string(end - pos) + " trailing bytes");
    }
  }
}

std::string describe_reducer(const Method& method) {
  if (method.is_scheme()) return method.canonical();
  switch (method.reducer()) {
    case ReducerKind::kDense:
      return "dense";
    case ReducerKind::kAllreduce:
      return "allreduce(" + method.canonical() + ")";
    case ReducerKind::kScatter:
      return "scatter(" + method.canonical() + ")";
    case ReducerKind::kAllgather:
    case ReducerKind::kAuto:
      break;
  }
  return "allgather(" + method.canonical() + ")";
}

std::unique_ptr<Reducer> make_reducer(const std::string& compressor_spec, ReducerKind kind,
                                      Communicator& comm, std::span<const std::size_t> bucket_sizes,
                                      const CodecRegistry& registry) {
  std::vector<BucketShape> shapes;
  for (std::size_t i = 0; i < bucket_sizes.size(); ++i) {
    shapes.push_back({static_cast<std::uint32_t>(i), bucket_sizes[i], true, 0});
  }
  return make_reducer(Method::parse(compressor_spec, {.reducer = kind}, registry), comm, shapes);
}

std::unique_ptr<Reducer> make_reducer(const std::string& compressor_spec, ReducerKind kind,
                                      Communicator& comm, std::span<const BucketShape> buckets,
                                      const CodecRegistry& registry) {
  return make_reducer(Method::parse(compressor_spec, {.reducer = kind}, registry), comm, buckets);
}

std::unique_ptr<Reducer> make_reducer(const Method& method, Communicator& comm,
                                      std::span<const BucketShape> buckets) {
  if (method.is_scheme()) {
    const SchemeInfo* scheme = find_scheme(method.name());
    if (scheme == nullptr) {
      throw Error("reducer: scheme " + method.name() + " is described but has no reducer");
    }
    return scheme->make(method.scheme_params(), method.canonical(), comm, buckets);
  }
  Mode mode = Mode::kAllgather;
  switch (method.reducer()) {
    case ReducerKind::kDense:
      mode = Mode::kDense;
      break;
    case ReducerKind::kAllreduce:
      mode = Mode::kAllreduce;
      break;
    case ReducerKind::kScatter:
      return make_scatter_reducer(method, comm, buckets);
    case ReducerKind::kAllgather:
    case ReducerKind::kAuto:  // never for a codec method: Method resolves it
      mode = Mode::kAllgather;
      break;
  }
  return std::make_unique<FusedReducer>(mode, method, comm, buckets);
}

}  // namespace gradcomp::dist
