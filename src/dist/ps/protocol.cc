#include "protocol.h"

#include <cstring>

#include "gradcomp/error.h"
#include "gradcomp/wire.h"

namespace gradcomp::dist::ps {

const char* to_string(Kind k) {
  switch (k) {
    case Kind::kHello:
      return "hello";
    case Kind::kPush:
      return "push";
    case Kind::kReply:
      return "reply";
    case Kind::kDone:
      return "done";
    case Kind::kStats:
      return "stats";
    case Kind::kCandidates:
      return "candidates";
  }
  return "?";
}

FrameBytes encode_frame(const Frame& f) {
  FrameBytes b{};
  std::byte* p = b.data();
  store_le<std::uint32_t>(p + 0, kFrameMagic);
  store_le<std::uint16_t>(p + 4, kFrameVersion);
  store_le<std::uint16_t>(p + 6, static_cast<std::uint16_t>(f.kind));
  store_le<std::uint32_t>(p + 8, f.sender);
  store_le<std::uint32_t>(p + 12, f.records);
  store_le<std::uint64_t>(p + 16, f.step);
  store_le<std::uint64_t>(p + 24, f.payload_bytes);
  store_le<float>(p + 32, f.lr);
  store_le<std::uint32_t>(p + 36, f.aux);
  store_le<std::uint64_t>(p + 40, f.aux64);
  return b;
}

Frame decode_frame(std::span<const std::byte, kFrameBytes> bytes, int sender,
                   const std::string& who) {
  const std::byte* p = bytes.data();
  const auto magic = load_le<std::uint32_t>(p);
  if (magic != kFrameMagic) {
    throw CorruptMessage("ps frame from " + who + ": bad magic 0x" + [&] {
      char b[16];
      std::snprintf(b, sizeof b, "%08x", magic);
      return std::string(b);
    }());
  }
  const auto version = load_le<std::uint16_t>(p + 4);
  if (version != kFrameVersion) {
    throw CorruptMessage("ps frame from " + who + ": version " + std::to_string(version) +
                         " != " + std::to_string(kFrameVersion));
  }
  const auto kind = load_le<std::uint16_t>(p + 6);
  if (kind < 1 || kind > 6) {
    throw CorruptMessage("ps frame from " + who + ": unknown kind " + std::to_string(kind));
  }
  Frame f;
  f.kind = static_cast<Kind>(kind);
  f.sender = load_le<std::uint32_t>(p + 8);
  if (f.sender != static_cast<std::uint32_t>(sender)) {
    throw CorruptMessage("ps frame from " + who + ": claims to come from rank " +
                         std::to_string(f.sender));
  }
  f.records = load_le<std::uint32_t>(p + 12);
  f.step = load_le<std::uint64_t>(p + 16);
  f.payload_bytes = load_le<std::uint64_t>(p + 24);
  f.lr = load_le<float>(p + 32);
  f.aux = load_le<std::uint32_t>(p + 36);
  f.aux64 = load_le<std::uint64_t>(p + 40);
  return f;
}

std::span<std::byte> RecordWriter::begin(std::uint32_t key, RecordKind kind,
                                         std::size_t max_bytes) {
  if (buf_.size() - pos_ < kRecordHeaderBytes + max_bytes) {
    throw Error("ps: record buffer too small (internal error)");
  }
  std::byte* p = buf_.data() + pos_;
  store_le<std::uint32_t>(p, key);
  p[4] = static_cast<std::byte>(kind);
  p[5] = p[6] = p[7] = std::byte{0};
  open_ = pos_;
  return buf_.subspan(pos_ + kRecordHeaderBytes, max_bytes);
}

void RecordWriter::end(std::size_t bytes) {
  store_le<std::uint32_t>(buf_.data() + open_ + 8, static_cast<std::uint32_t>(bytes));
  pos_ = open_ + kRecordHeaderBytes + bytes;
  ++records_;
}

Record RecordReader::next() {
  if (buf_.size() - pos_ < kRecordHeaderBytes) {
    throw CorruptMessage("ps payload from " + who_ + ": record header truncated at byte " +
                         std::to_string(pos_) + " of " + std::to_string(buf_.size()));
  }
  const std::byte* p = buf_.data() + pos_;
  Record r;
  r.key = load_le<std::uint32_t>(p);
  const auto kind = static_cast<std::uint8_t>(p[4]);
  if (kind < 1 || kind > 5) {
    throw CorruptMessage("ps payload from " + who_ + ": record kind " + std::to_string(kind) +
                         " unknown (key " + std::to_string(r.key) + ")");
  }
  if (p[5] != std::byte{0} || p[6] != std::byte{0} || p[7] != std::byte{0}) {
    throw CorruptMessage("ps payload from " + who_ + ": nonzero record padding (key " +
                         std::to_string(r.key) + ")");
  }
  r.kind = static_cast<RecordKind>(kind);
  const std::size_t len = load_le<std::uint32_t>(p + 8);
  if (buf_.size() - pos_ - kRecordHeaderBytes < len) {
    throw CorruptMessage("ps payload from " + who_ + ": record of key " + std::to_string(r.key) +
                         " has " + std::to_string(len) + " bytes > " +
                         std::to_string(buf_.size() - pos_ - kRecordHeaderBytes) + " left");
  }
  r.data = buf_.subspan(pos_ + kRecordHeaderBytes, len);
  pos_ += kRecordHeaderBytes + len;
  return r;
}

namespace {
void mix(std::uint64_t& h, std::string_view s) {
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  h ^= 0xFF;
  h *= 0x100000001B3ull;
}
void mix(std::uint64_t& h, std::uint64_t v) { mix(h, std::to_string(v)); }
}  // namespace

std::uint64_t config_hash(const PsConfig& c, std::string_view canonical_compressor,
                          std::span<const BucketShape> buckets) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  mix(h, to_string(c.topology));
  mix(h, static_cast<std::uint64_t>(c.servers));
  mix(h, static_cast<std::uint64_t>(c.workers));
  mix(h, canonical_compressor);
  mix(h, to_string(c.downlink));
  mix(h, static_cast<std::uint64_t>(c.max_staleness + 1));
  mix(h, c.split_elements);
  mix(h, c.seed);
  if (c.topology == Topology::kPsAsync) {
    mix(h, std::to_string(c.momentum) + "/" + std::to_string(c.weight_decay) +
               (c.nesterov ? "/nesterov" : "") + "/" + to_string(c.async_momentum));
  }
  for (const BucketShape& b : buckets) {
    mix(h, b.id);
    mix(h, b.numel);
    mix(h, b.compressible ? 1u : 0u);
    mix(h, b.rows);
  }
  return h;
}

void send_message(Communicator& comm, int dst, int frame_tag, int payload_tag, const Frame& f,
                  std::span<const std::byte> payload) {
  const FrameBytes fb = encode_frame(f);
  P2PRequest a = comm.isend_bytes(dst, frame_tag, fb);
  P2PRequest b = comm.isend_bytes(dst, payload_tag, payload.first(f.payload_bytes));
  comm.wait(a);
  comm.wait(b);
}

}  // namespace gradcomp::dist::ps
