// Benchmarks only: encode without the checksum, to measure what the checksum costs
// inside Codec::encode ("gradcomp bench codec" times encode with and without it, call
// for call). While a ScopedChecksumOff lives on a thread, encode() and write_header()
// on that thread leave the header's CRC field 0 and skip the fused checksum (a codec's
// encode hooks get a null PayloadCrc, codec.h), so decoding such a message fails: never
// send one.
#pragma once

namespace gradcomp::detail {

class ScopedChecksumOff {
 public:
  ScopedChecksumOff();
  ~ScopedChecksumOff();
  ScopedChecksumOff(const ScopedChecksumOff&) = delete;
  ScopedChecksumOff& operator=(const ScopedChecksumOff&) = delete;
};

bool checksum_disabled();

}  // namespace gradcomp::detail
