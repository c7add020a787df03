#include "checked_decode.h"

#include <algorithm>
#include <string>

#include "codecs.h"
#include "gradcomp/error.h"

namespace gradcomp::device {

at::Tensor padding_dirty(const at::Tensor& payloads, std::span<const std::int64_t> offsets,
                         std::span<const std::int64_t> bytes, std::span<const std::int64_t> ns,
                         int bits) {
  const auto messages = static_cast<std::int64_t>(offsets.size());
  // Rows of one upload: each checked byte's position, the mask of its padding bits, its
  // message. Bit p of a word (p = 0 first, MSB first in byte p / 8) holds code bit p.
  std::vector<std::int64_t> table;
  std::int64_t checked = 0;
  for (std::size_t i = 0; i < offsets.size(); ++i) {
    if (ns[i] == 0) continue;  // no codes, no word
    const std::int64_t words = (ns[i] * bits + 31) / 32;
    const std::int64_t used = ns[i] * bits - 32 * (words - 1);  // code bits in the last word
    for (std::int64_t j = 0; j < 4; ++j) {
      // Byte j holds word bits 8j .. 8j + 7, its top `code_bits` of them codes.
      const std::int64_t code_bits = std::clamp<std::int64_t>(used - 8 * j, 0, 8);
      const std::int64_t mask = (std::int64_t{1} << (8 - code_bits)) - 1;
      if (mask == 0) continue;
      table.push_back(offsets[i] + bytes[i] - 4 + j);
      table.push_back(mask);
      table.push_back(static_cast<std::int64_t>(i));
      ++checked;
    }
  }
  const at::Tensor out = at::zeros({messages}, payloads.options().dtype(at::kFloat));
  if (checked == 0) return out;
  const at::Tensor rows = longs_to_device(table, payloads.device()).view({checked, 3});
  const at::Tensor dirty = payloads.index_select(0, rows.select(1, 0))
                               .to(at::kLong)
                               .bitwise_and_(rows.select(1, 1))
                               .ne(0)
                               .to(at::kFloat);
  return out.index_add_(0, rows.select(1, 2), dirty);
}

void CheckedDecodeCodec::decode_add_impl(const at::Tensor& payload, const at::Tensor& out,
                                         float alpha) const {
  const std::int64_t n = out.numel();
  expect_payload_size(payload, payload_bytes(n), codec().name() + " decode", n);
  const std::int64_t offset = 0;
  const std::int64_t length = payload.numel();
  const at::Tensor report = reports(payload, {&offset, 1}, {&length, 1}, {&n, 1}, {&payload, 1})
                                .to(at::kCPU)
                                .contiguous();
  check(payload, n, report.data_ptr<float>());
  if (n > 0) add_checked(payload, out, alpha, report.data_ptr<float>());
}

void CheckedDecodeCodec::decode_batch_impl(const at::Tensor& payloads,
                                           std::span<const std::int64_t> offsets,
                                           std::span<const std::int64_t> bytes,
                                           std::span<const at::Tensor> outs, float alpha) const {
  const std::size_t segments = outs.size();
  if (segments == 0) return;
  const std::size_t messages = offsets.size();
  const std::size_t ranks = messages / segments;
  const std::string op = codec().name() + " decode";
  std::vector<std::int64_t> ns(messages);
  // Lengths first, in segment-major order (the order of the one-payload loop's refusals).
  for (std::size_t s = 0; s < segments; ++s) {
    for (std::size_t r = 0; r < ranks; ++r) {
      const std::size_t i = r * segments + s;
      ns[i] = outs[s].numel();
      expect_payload_size(payloads.narrow(0, offsets[i], bytes[i]), payload_bytes(ns[i]), op,
                          ns[i]);
    }
  }
  std::vector<at::Tensor> payload(messages);
  for (std::size_t i = 0; i < messages; ++i) {
    payload[i] = aligned_payload(payloads.narrow(0, offsets[i], bytes[i]));
  }
  const at::Tensor host =
      messages == 0 ? at::empty({0, report_size()})
                    : reports(payloads, offsets, bytes, ns, payload).to(at::kCPU).contiguous();
  const float* report = host.data_ptr<float>();
  const auto row = [&](std::size_t i) { return report + i * report_size(); };
  for (std::size_t s = 0; s < segments; ++s) {
    for (std::size_t r = 0; r < ranks; ++r) {
      const std::size_t i = r * segments + s;
      check(payload[i], ns[i], row(i));
    }
  }
  add_batch(payload, ns, outs, alpha, report);
}

void CheckedDecodeCodec::add_batch(std::span<const at::Tensor> payload,
                                   std::span<const std::int64_t> /*ns*/,
                                   std::span<const at::Tensor> outs, float alpha,
                                   const float* reports) const {
  const std::size_t segments = outs.size();
  const std::size_t ranks = payload.size() / segments;
  for (std::size_t s = 0; s < segments; ++s) {
    outs[s].zero_();
    if (outs[s].numel() == 0) continue;
    for (std::size_t r = 0; r < ranks; ++r) {
      const std::size_t i = r * segments + s;
      add_checked(payload[i], outs[s], alpha, reports + i * report_size());
    }
  }
}

}  // namespace gradcomp::device
