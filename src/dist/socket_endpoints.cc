#include "socket_endpoints.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <system_error>
#include <vector>

namespace gradcomp::dist {

namespace {

std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  while (pos < line.size()) {
    while (pos < line.size() && line[pos] == ' ') ++pos;
    const std::size_t end = line.find(' ', pos);
    const std::size_t stop = end == std::string_view::npos ? line.size() : end;
    if (stop > pos) out.push_back(line.substr(pos, stop - pos));
    pos = stop;
  }
  return out;
}

template <class Unsigned>
bool parse_number(std::string_view text, Unsigned& out, int base) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out, base);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

// The kernel prints each 32-bit word of the address as the integer the word's bytes hold
// in host order ("0100007F" is 127.0.0.1 on x86): stored back as that integer, the
// word's bytes are the address's bytes in network order again. Empty for the wildcard.
std::string address_text(std::string_view hex) {
  char text[INET6_ADDRSTRLEN] = {};
  if (hex.size() == 8) {
    in_addr a{};
    if (!parse_number(hex, a.s_addr, 16) || a.s_addr == INADDR_ANY) return {};
    return inet_ntop(AF_INET, &a, text, sizeof text) != nullptr ? text : "";
  }
  if (hex.size() == 32) {
    std::uint32_t words[4];
    for (std::size_t i = 0; i < 4; ++i) {
      if (!parse_number(hex.substr(8 * i, 8), words[i], 16)) return {};
    }
    in6_addr a{};
    static_assert(sizeof words == sizeof a.s6_addr);
    std::memcpy(a.s6_addr, words, sizeof words);
    if (IN6_IS_ADDR_UNSPECIFIED(&a)) return {};
    return inet_ntop(AF_INET6, &a, text, sizeof text) != nullptr ? text : "";
  }
  return {};
}

// Inodes of the sockets among this process's open file descriptors ("socket:[123]").
std::set<unsigned long> own_socket_inodes() {
  std::set<unsigned long> out;
  std::error_code ec;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    std::error_code link_ec;
    const std::string target = std::filesystem::read_symlink(fd.path(), link_ec).string();
    if (link_ec || !target.starts_with("socket:[") || !target.ends_with("]")) continue;
    unsigned long inode = 0;
    if (parse_number(std::string_view(target).substr(8, target.size() - 9), inode, 10)) {
      out.insert(inode);
    }
  }
  return out;
}

}  // namespace

std::optional<SocketRow> parse_socket_row(std::string_view line) {
  // "sl  local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout
  //  inode ...", e.g. "0: 0100007F:8A15 00000000:0000 0A ... 0 123456 ..."
  const auto fields = fields_of(line);
  if (fields.size() < 10 || fields[0].size() < 2 || fields[0].back() != ':') return std::nullopt;
  const std::string_view local = fields[1];
  const auto colon = local.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  SocketRow row;
  row.address = address_text(local.substr(0, colon));
  if (row.address.empty() || !parse_number(local.substr(colon + 1), row.port, 16) ||
      !parse_number(fields[9], row.inode, 10)) {
    return std::nullopt;
  }
  return row;
}

std::string gloo_spellings(const SocketRow& row) {
  const std::string prefix = "[" + row.address + "]:";
  std::string out = prefix + std::to_string(row.port) + "\n";
  const std::uint16_t as_gloo_prints = htons(row.port);
  if (as_gloo_prints != row.port) out += prefix + std::to_string(as_gloo_prints) + "\n";
  return out;
}

std::string local_tcp_endpoints() {
  const std::set<unsigned long> mine = own_socket_inodes();
  std::string out;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(table);
    for (std::string line; std::getline(in, line);) {
      const auto row = parse_socket_row(line);
      if (row && row->inode != 0 && mine.contains(row->inode)) out += gloo_spellings(*row);
    }
  }
  return out;
}

}  // namespace gradcomp::dist
