// The endpoint table that names a lost peer by rank (src/dist/socket_endpoints.h):
// rows of /proc/net/tcp{,6} as the kernel writes them, Gloo's two spellings of a port,
// and this process's own sockets.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "../../src/dist/socket_endpoints.h"

namespace gradcomp::dist {
namespace {

TEST(SocketEndpoints, ParsesAnIpv4Row) {
  const auto row = parse_socket_row(
      "   3: 0100007F:8A15 0100007F:BEB4 01 00000000:00000000 00:00000000 00000000     0"
      "        0 4242 1 0000000000000000 20 4 30 10 -1");
  ASSERT_TRUE(row.has_value());
  EXPECT_EQ(row->address, "127.0.0.1");
  EXPECT_EQ(row->port, 35349);
  EXPECT_EQ(row->inode, 4242u);
}

TEST(SocketEndpoints, ParsesIpv6AndMappedRows) {
  const auto loopback = parse_socket_row(
      "   0: 00000000000000000000000001000000:0050 00000000000000000000000000000000:0000 0A "
      "00000000:00000000 00:00000000 00000000 0 0 77 1");
  ASSERT_TRUE(loopback.has_value());
  EXPECT_EQ(loopback->address, "::1");
  EXPECT_EQ(loopback->port, 80);
  const auto mapped = parse_socket_row(
      "   1: 0000000000000000FFFF00000100007F:73AB 0000000000000000FFFF00000100007F:DCCC 01 "
      "00000000:00000000 00:00000000 00000000 0 0 78 1");
  ASSERT_TRUE(mapped.has_value());
  EXPECT_EQ(mapped->address, "::ffff:127.0.0.1");
  EXPECT_EQ(mapped->port, 29611);
}

TEST(SocketEndpoints, RefusesHeadersWildcardsAndMalformedRows) {
  EXPECT_FALSE(
      parse_socket_row("  sl  local_address rem_address   st tx_queue rx_queue tr "
                       "tm->when retrnsmt   uid  timeout inode"));
  EXPECT_FALSE(parse_socket_row("   0: 00000000:73AB 00000000:0000 0A 0:0 0:0 0 0 0 5 1"));
  EXPECT_FALSE(parse_socket_row(
      "   0: 00000000000000000000000000000000:73AB 00000000000000000000000000000000:0000 0A "
      "0:0 0:0 0 0 0 5 1"));
  EXPECT_FALSE(parse_socket_row("   0: 0100007F:1FFFF 00000000:0000 0A 0:0 0:0 0 0 0 5 1"));
  EXPECT_FALSE(parse_socket_row("   0: 0100007G:0050 00000000:0000 0A 0:0 0:0 0 0 0 5 1"));
  EXPECT_FALSE(parse_socket_row("   0: 0100007F 00000000:0000 0A 0:0 0:0 0 0 0 5 1"));
  EXPECT_FALSE(parse_socket_row("   0: 0100007F:0050 00000000:0000 0A 0:0 0:0 0 0 0 x5 1"));
  EXPECT_FALSE(parse_socket_row("   0: 0100007F:0050"));
  EXPECT_FALSE(parse_socket_row(""));
}

TEST(SocketEndpoints, SpellsThePortBothWaysGlooMay) {
  SocketRow row{"127.0.0.1", 35349, 1};
  const std::string swapped = std::to_string(htons(35349));
  if (htons(1) == 1) {
    EXPECT_EQ(gloo_spellings(row), "[127.0.0.1]:35349\n");
  } else {
    EXPECT_EQ(gloo_spellings(row), "[127.0.0.1]:35349\n[127.0.0.1]:" + swapped + "\n");
  }
  row.port = 0x0101;  // the same both ways: one line
  EXPECT_EQ(gloo_spellings(row), "[127.0.0.1]:257\n");
}

TEST(SocketEndpoints, ListsAListeningSocketOfThisProcess) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  const std::string listed = local_tcp_endpoints();
  EXPECT_NE(listed.find("[127.0.0.1]:" + port + "\n"), std::string::npos) << listed;
  ::close(fd);
  EXPECT_EQ(local_tcp_endpoints().find("[127.0.0.1]:" + port + "\n"), std::string::npos);
}

}  // namespace
}  // namespace gradcomp::dist
