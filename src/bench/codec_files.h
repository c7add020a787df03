// `gradcomp codec encode|decode`: one codec step on files (raw little-endian float32
// gradients, wire messages, and the memory's state for stateful specs).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "gradcomp/registry.h"
#include "gradcomp/step_context.h"

namespace gradcomp::bench {

struct EncodeFileRequest {
  std::string spec;      // a compressor spec: wrappers allowed ("ef(topk:ratio=0.01)")
  std::string in;        // float32 gradient
  std::string out;       // the message
  std::string residual;  // optional: the memory's state, read if present, written back
  StepContext ctx;
};

struct EncodeFileResult {
  std::size_t n = 0;
  std::size_t message_bytes = 0;
  std::string memory_spec;  // canonical
  bool residual_loaded = false;
};

// Reads the gradient, builds make_memory(spec, n), loads the state (the concatenation
// of Memory::state() buffers) from `residual` when that file exists, compresses, and
// writes the message and then the new state, each atomically. Nothing is written if
// anything before the first write fails.
EncodeFileResult encode_file(const CodecRegistry& registry, const EncodeFileRequest& request);

struct DecodeFileResult {
  std::size_t n = 0;
  std::string codec_spec;  // canonical
};

// The largest element count decode_file() trusts a header for when the caller does
// not say how many elements to expect: 2^28 floats, a 1 GiB output file.
inline constexpr std::size_t kDecodeFileMaxElements = std::size_t{1} << 28;

// Decodes the message in `in` with the codec of `spec` (ef()/noef() stripped) into
// n zeros and writes the floats to `out` atomically. n is `expected_n` when given (a
// header that says otherwise is refused), else the header's, if at most
// kDecodeFileMaxElements (a damaged or hostile count must not size a huge file). A
// message that fails validation (CorruptMessage) leaves `out` untouched.
DecodeFileResult decode_file(const CodecRegistry& registry, const std::string& spec,
                             const std::string& in, const std::string& out,
                             std::optional<std::size_t> expected_n = std::nullopt);

}  // namespace gradcomp::bench
