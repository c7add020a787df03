// This process's TCP endpoints, written as Gloo writes a peer's address in its error
// messages ("[127.0.0.1]:40123"). Every rank of a communicator publishes its list once,
// so that a failure whose message names a peer's address maps back to the rank that owns
// that endpoint (communicator.cc). Read from the kernel's socket tables
// (/proc/self/net/tcp and tcp6, for the sockets among this process's file descriptors):
// nothing of Gloo's internals, so it reads the same under every torch release. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gradcomp::dist {

// One endpoint a line; empty where /proc cannot be read (a peer then names no rank).
// Sockets bound to the wildcard address are left out: no message names them.
std::string local_tcp_endpoints();

// One row of /proc/net/tcp or /proc/net/tcp6: the local address (inet_ntop's text), port
// and the socket's inode. nullopt for the header, a malformed row or a wildcard address.
struct SocketRow {
  std::string address;
  std::uint16_t port = 0;
  unsigned long inode = 0;
};
std::optional<SocketRow> parse_socket_row(std::string_view line);

// The ways Gloo may print this endpoint, one a line: "[address]:port", and the same with
// the port's two bytes swapped on a little-endian host. Gloo's tcp::Address::str() prints
// sin_port without ntohs (seen in torch 2.13's Gloo: "Read error [127.0.0.1]:5514" for a
// peer listening on port 35349 = 0x8A15); the true spelling is kept in case Gloo fixes it.
std::string gloo_spellings(const SocketRow& row);

}  // namespace gradcomp::dist
