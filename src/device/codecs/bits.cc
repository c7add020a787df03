// The 1- and 2-bit layouts of src/core/detail/bitpack.h in ATen operations: value i's code
// sits MSB-first in byte i/k (k = 8 values a byte for 1 bit, 4 for 2 bits), the payload is
// a whole number of 32-bit words and the codes after n are 0. Packing multiplies each
// code by its place value (uint8, never wider) and sums each byte's group; unpacking
// masks or shifts every byte against the k place values. No host work, no sync.
// The b-bit streams of src/core/detail/bitstream.h (int's codes) are the same packing of
// each code's bits, LSB first in the stream and in each byte.
#include "codecs.h"

namespace gradcomp::device {

namespace {

// The shift of code j of a byte: bits * (k - 1 - j) MSB first, bits * j LSB first.
at::Tensor shifts(std::int64_t k, std::int64_t bits, bool msb_first, const at::Device& device) {
  const at::TensorOptions opts = at::TensorOptions().dtype(at::kInt).device(device);
  // arange on the device: no host-to-device copy, so no sync.
  return (msb_first ? at::arange(k - 1, -1, -1, opts) : at::arange(k, opts)) * bits;
}

// The place values of the k codes of a byte, 2^shift, uint8.
at::Tensor place_values(std::int64_t k, std::int64_t bits, bool msb_first,
                        const at::Device& device) {
  const at::Tensor s = shifts(k, bits, msb_first, device);
  return at::bitwise_left_shift(at::ones_like(s), s).to(at::kByte);
}

// Sums groups of `per_byte` codes (uint8 or bool, place values applied by `weights`) into
// out (uint8, packed_bytes long); the codes past n are zero.
void pack(const at::Tensor& codes, std::int64_t per_byte, std::int64_t bits, bool msb_first,
          const at::Tensor& out) {
  const std::int64_t n = codes.numel();
  const std::int64_t bytes = out.numel();
  if (bytes == 0) return;
  const at::Tensor weights = place_values(per_byte, bits, msb_first, codes.device());
  // Whole bytes straight from the codes; the last partial byte and the word's padding
  // from a small zero-padded copy of the tail (never a copy of all the codes).
  const std::int64_t whole = n / per_byte;
  if (whole > 0) {
    const at::Tensor placed =
        codes.narrow(0, 0, whole * per_byte).view({whole, per_byte}) * weights;
    at::Tensor whole_out = out.narrow(0, 0, whole);
    at::sum_out(whole_out, placed, {1}, false, at::kByte);
  }
  if (whole < bytes) {
    const std::int64_t rest = n - whole * per_byte;
    at::Tensor tail = at::zeros({(bytes - whole) * per_byte}, out.options());
    tail.narrow(0, 0, rest).copy_(codes.narrow(0, whole * per_byte, rest));
    at::Tensor tail_out = out.narrow(0, whole, bytes - whole);
    at::sum_out(tail_out, tail.view({bytes - whole, per_byte}) * weights, {1}, false, at::kByte);
  }
}

// The codes of every byte, per_byte a byte, first code first: uint8 of bytes * per_byte.
at::Tensor unpack(const at::Tensor& packed, std::int64_t per_byte, std::int64_t bits,
                  bool msb_first) {
  const at::Tensor s = shifts(per_byte, bits, msb_first, packed.device()).to(at::kByte);
  const std::int64_t mask = (std::int64_t{1} << bits) - 1;
  return at::bitwise_right_shift(packed.unsqueeze(1), s).bitwise_and_(mask).view({-1});
}

}  // namespace

void pack1(const at::Tensor& bits, const at::Tensor& out) { pack(bits, 8, 1, true, out); }
void pack2(const at::Tensor& codes, const at::Tensor& out) { pack(codes, 4, 2, true, out); }
at::Tensor unpack1(const at::Tensor& packed) { return unpack(packed, 8, 1, true); }
at::Tensor unpack2(const at::Tensor& packed) { return unpack(packed, 4, 2, true); }

at::Tensor code_stream_bits(const at::Tensor& codes, std::int64_t bits) {
  return at::bitwise_right_shift(codes.unsqueeze(1),
                                 shifts(bits, 1, false, codes.device()).to(at::kByte))
      .bitwise_and_(1)
      .view({-1});
}

void pack_stream_bits(const at::Tensor& stream_bits, const at::Tensor& out) {
  pack(stream_bits, 8, 1, false, out);
}

void pack_stream(const at::Tensor& codes, std::int64_t bits, const at::Tensor& out) {
  pack_stream_bits(code_stream_bits(codes, bits), out);
}

at::Tensor unpack_stream_bits(const at::Tensor& packed) { return unpack(packed, 8, 1, false); }

at::Tensor stream_codes(const at::Tensor& stream_bits, std::int64_t n, std::int64_t bits) {
  const at::Tensor placed = stream_bits.narrow(0, 0, n * bits).view({n, bits}) *
                            place_values(bits, 1, false, stream_bits.device());
  return at::sum(placed, {1}, false, at::kByte);
}

}  // namespace gradcomp::device
