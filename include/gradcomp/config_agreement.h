// Checking that every rank of a run was started with the same configuration, before
// the first step (as torch DDP verifies parameter shapes across processes). Ranks
// started with different models, layouts or compressors would otherwise exchange
// tensors of different sizes and fail deep inside the transport (issue #15: Gloo's
// "op.preamble.length <= op.nbytes" on one rank, a connection reset on the other).
//
// Each rank describes what must match as an ordered list of (field, value) strings;
// the lists are exchanged (dist/config_check.h does it with one allgather) and every
// rank runs the same comparison on the same data, so all of them fail together with
// the same one-line message naming the field, the values and the ranks, e.g.
//   ranks disagree on model parameter 1 (fc1.weight) shape: rank 0 has [256, 784],
//   rank 1 has [512, 784]
// Order the fields from the flags a user sets to what is derived from them (the model's
// shapes, the buckets): the first difference is the one reported, so it names the flag
// to change when a flag differs.
//
// No LibTorch and no communication here: testable without processes.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace gradcomp {

struct ConfigField {
  std::string name;   // "model parameter 1 (fc1.weight) shape"
  std::string value;  // "[256, 784]"
};

using ConfigFields = std::vector<ConfigField>;

// The bytes one rank contributes: u32 count, then per field u32 length + name and u32
// length + value (little-endian).
std::vector<std::byte> serialize_config(std::span<const ConfigField> fields);

// The inverse; CorruptMessage naming `rank` if the bytes are not such a list.
ConfigFields parse_config(std::span<const std::byte> bytes, int rank);

// Compares every rank's fields with rank 0's, in order; returns the first difference
// as one line (nullopt when all agree). A field missing on one side (lists of different
// lengths, e.g. models with different parameter counts whose count field was left out)
// reads as "(none)".
std::optional<std::string> find_config_disagreement(std::span<const ConfigFields> per_rank);

}  // namespace gradcomp
