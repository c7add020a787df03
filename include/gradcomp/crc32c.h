// CRC-32C (Castagnoli; reflected polynomial 0x82F63B78, initial value and final XOR
// 0xFFFFFFFF), the checksum of iSCSI, ext4 and SCTP. gradcomp messages carry one over
// their header and payload (wire.h).
//
// crc32c() uses SSE4.2's crc32 instruction when the CPU running the program has it
// (checked once, at run time: the build baseline does not assume it) and a portable
// table-driven loop otherwise. Both give the same value for every input.
#pragma once

#include <cstdint>
#include <span>

namespace gradcomp {

// The CRC-32C of `data`, continuing from `crc` (the value returned for the bytes
// before it; 0 to start): crc32c(b, crc32c(a)) == crc32c(a followed by b).
std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc = 0);

// The portable implementation, always (tests compare the two).
std::uint32_t crc32c_portable(std::span<const std::byte> data, std::uint32_t crc = 0);

// Whether crc32c() runs on the SSE4.2 instruction on this machine.
bool crc32c_uses_hardware();

}  // namespace gradcomp
