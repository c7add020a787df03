// The parameter server's frames and records (layout in gradcomp/dist/ps.h), the
// configuration hash both sides compare at the handshake, and the small helpers the
// worker and server loops share. Internal to gradcomp_dist.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/dist/ps.h"

namespace gradcomp::dist::ps {

inline constexpr std::size_t kFrameBytes = 48;
inline constexpr std::size_t kRecordHeaderBytes = 12;
inline constexpr std::uint32_t kFrameMagic = 0x53504347;  // "GCPS"
inline constexpr std::uint16_t kFrameVersion = 1;

// Tags: worker -> server frames and payloads, server -> worker frames and payloads.
inline constexpr int kTagPushFrame = 11;
inline constexpr int kTagPushPayload = 12;
inline constexpr int kTagReplyFrame = 13;
inline constexpr int kTagReplyPayload = 14;

// kCandidates: Sketched-SGD's first reply (the coordinates whose exact values the
// server asks for next; see sketch_plan.h).
enum class Kind : std::uint16_t {
  kHello = 1,
  kPush = 2,
  kReply = 3,
  kDone = 4,
  kStats = 5,
  kCandidates = 6
};
const char* to_string(Kind k);

// kSketch: a count-sketch table (fp32 cells); kIndices: ascending u32 coordinates;
// kSparse: u32 count c, c ascending u32 coordinates, c fp32 values (sketch_plan.h).
enum class RecordKind : std::uint8_t {
  kDense = 1,
  kCodec = 2,
  kSketch = 3,
  kIndices = 4,
  kSparse = 5
};

struct Frame {
  Kind kind = Kind::kPush;
  std::uint32_t sender = 0;
  std::uint32_t records = 0;
  std::uint64_t step = 0;
  std::uint64_t payload_bytes = 0;
  float lr = 0;
  std::uint32_t aux = 0;
  std::uint64_t aux64 = 0;
};

using FrameBytes = std::array<std::byte, kFrameBytes>;

FrameBytes encode_frame(const Frame& f);
// Validates magic, version, kind and that `sender` (the rank the message came from)
// is the rank the frame names; CorruptMessage "ps <who>: ..." otherwise.
Frame decode_frame(std::span<const std::byte, kFrameBytes> bytes, int sender,
                   const std::string& who);

// Appends records into a preallocated buffer.
class RecordWriter {
 public:
  explicit RecordWriter(std::span<std::byte> buffer) : buf_(buffer) {}
  // Reserves a record of at most max_bytes; returns where its data goes.
  std::span<std::byte> begin(std::uint32_t key, RecordKind kind, std::size_t max_bytes);
  // Closes the record opened by begin() with its actual length.
  void end(std::size_t bytes);
  std::size_t size() const { return pos_; }
  std::uint32_t records() const { return records_; }

 private:
  std::span<std::byte> buf_;
  std::size_t pos_ = 0;
  std::size_t open_ = 0;
  std::uint32_t records_ = 0;
};

struct Record {
  std::uint32_t key = 0;
  RecordKind kind = RecordKind::kDense;
  std::span<const std::byte> data;
};

// Reads records one by one, checking framing (lengths, zero padding, known kind).
class RecordReader {
 public:
  RecordReader(std::span<const std::byte> payload, std::string who)
      : buf_(payload), who_(std::move(who)) {}
  Record next();
  bool done() const { return pos_ == buf_.size(); }

 private:
  std::span<const std::byte> buf_;
  std::size_t pos_ = 0;
  std::string who_;
};

// FNV-1a 64 over everything both sides must agree on.
std::uint64_t config_hash(const PsConfig& config, std::string_view canonical_compressor,
                          std::span<const BucketShape> buckets);

// Frame + payload send / receive helpers that post both before waiting.
void send_message(Communicator& comm, int dst, int frame_tag, int payload_tag, const Frame& f,
                  std::span<const std::byte> payload);

}  // namespace gradcomp::dist::ps
