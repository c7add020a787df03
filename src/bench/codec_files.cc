#include "bench/codec_files.h"

#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "bench/raw_io.h"
#include "gradcomp/error.h"
#include "gradcomp/wire.h"

namespace gradcomp::bench {

namespace {

std::size_t state_elements(const std::vector<StateBuffer>& state) {
  std::size_t total = 0;
  for (const auto& b : state) total += b.data.size();
  return total;
}

// Zero-filled floats from calloc: for a large n the pages stay untouched (and so cost
// no memory) until decode writes them, which it does only after the message validated.
struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

}  // namespace

EncodeFileResult encode_file(const CodecRegistry& registry, const EncodeFileRequest& request) {
  const std::vector<float> grad = read_floats(request.in);
  std::unique_ptr<Memory> memory = registry.make_memory(request.spec, grad.size());
  EncodeFileResult result;
  result.n = grad.size();
  result.memory_spec = memory->spec();

  std::vector<StateBuffer> state = memory->state();
  if (!request.residual.empty()) {
    if (state.empty()) {
      throw InvalidArgument("--residual: spec '" + memory->spec() +
                            "' keeps no memory (wrap it in ef(...) to keep a residual)");
    }
    if (file_exists(request.residual)) {
      const std::vector<float> saved = read_floats(request.residual);
      const std::size_t expected = state_elements(state);
      if (saved.size() != expected) {
        throw InvalidArgument("'" + request.residual + "': residual of " +
                              std::to_string(saved.size()) + " floats, but '" + memory->spec() +
                              "' keeps " + std::to_string(expected) + " for " +
                              std::to_string(grad.size()) + " elements");
      }
      std::size_t at = 0;
      for (auto& b : state) {
        std::copy_n(saved.begin() + static_cast<std::ptrdiff_t>(at), b.data.size(), b.data.begin());
        at += b.data.size();
      }
      result.residual_loaded = true;
    }
  }

  std::vector<std::byte> msg(memory->max_encoded_bytes());
  result.message_bytes = memory->compress(grad, request.ctx, msg);
  // The message and the residual belong together: both are written in full to their
  // temporaries before either replaces its file, so that a residual that cannot be
  // written leaves the old message (and residual) in place.
  PendingFile message(request.out, std::span<const std::byte>(msg.data(), result.message_bytes));
  std::optional<PendingFile> residual;
  if (!request.residual.empty()) {
    std::vector<float> saved;
    saved.reserve(state_elements(state));
    for (const auto& b : memory->state()) saved.insert(saved.end(), b.data.begin(), b.data.end());
    residual.emplace(request.residual, std::as_bytes(std::span<const float>(saved)));
  }
  message.commit();
  if (residual) residual->commit();
  return result;
}

DecodeFileResult decode_file(const CodecRegistry& registry, const std::string& spec,
                             const std::string& in, const std::string& out,
                             std::optional<std::size_t> expected_n) {
  const std::shared_ptr<const Codec> codec = registry.make_codec_of(spec);
  const std::vector<std::byte> msg = read_bytes(in);
  DecodeFileResult result;
  result.codec_spec = codec->spec();
  std::unique_ptr<float, FreeDeleter> values;
  try {
    // The framing and the header's codec, parameters and n, before n floats are
    // allocated for a message that may lie about n.
    const WireHeader header = read_header(msg, codec->name() + " decode");
    result.n = header.elements;
    if (expected_n && *expected_n != result.n) {
      throw CorruptMessage("the header says " + std::to_string(result.n) +
                           " elements, --n expects " + std::to_string(*expected_n));
    }
    if (!expected_n && result.n > kDecodeFileMaxElements) {
      throw CorruptMessage("the header says " + std::to_string(result.n) +
                           " elements, more than the " + std::to_string(kDecodeFileMaxElements) +
                           " (1 GiB of float32) decoded without --n; pass --n with the "
                           "element count you expect to decode a larger gradient");
    }
    open_payload(msg, *codec, result.n);
    values.reset(static_cast<float*>(std::calloc(result.n == 0 ? 1 : result.n, sizeof(float))));
    if (!values) {
      throw InvalidArgument("'" + in + "': cannot allocate " + std::to_string(result.n) +
                            " floats for the message's elements");
    }
    codec->decode_add(msg, std::span<float>(values.get(), result.n));
  } catch (const CorruptMessage& e) {
    throw CorruptMessage("'" + in + "': " + e.what());
  }
  write_floats_atomic(out, std::span<const float>(values.get(), result.n));
  return result;
}

}  // namespace gradcomp::bench
