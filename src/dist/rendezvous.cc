// rendezvous_from_env: flags first, then the variables that torchrun, mpirun and Slurm
// set. Nothing here talks to the network; Communicator::connect does.
#include <charconv>
#include <cstdlib>
#include <string>
#include <string_view>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/error.h"

namespace gradcomp::dist {

namespace {

struct Source {
  std::string name;  // "--rank" or "RANK"
  std::string value;
};

// The first of flag, env[keys...] that is set.
std::optional<Source> pick(const std::optional<std::string>& flag, std::string_view flag_name,
                           const Environment& env, std::initializer_list<std::string_view> keys) {
  if (flag) return Source{std::string(flag_name), *flag};
  for (std::string_view k : keys) {
    if (auto it = env.find(k); it != env.end()) return Source{std::string(k), it->second};
  }
  return std::nullopt;
}

long long parse_int(const Source& s, long long min, long long max) {
  long long v = 0;
  const char* first = s.value.data();
  const char* last = first + s.value.size();
  const auto [ptr, ec] = std::from_chars(first, last, v);
  if (s.value.empty() || ec != std::errc() || ptr != last) {
    throw InvalidArgument("rendezvous: " + s.name + "='" + s.value + "' is not an integer");
  }
  if (v < min || v > max) {
    throw InvalidArgument("rendezvous: " + s.name + "=" + s.value + " outside [" +
                          std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return v;
}

}  // namespace

RendezvousConfig rendezvous_from_env(const RendezvousFlags& flags, const Environment& env) {
  RendezvousConfig c;
  const auto world = pick(flags.world_size, "--world-size", env,
                          {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"});
  const auto rank =
      pick(flags.rank, "--rank", env, {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"});
  if (!world) {
    throw InvalidArgument(
        "rendezvous: no world size (--world-size, WORLD_SIZE, OMPI_COMM_WORLD_SIZE or "
        "SLURM_NTASKS)");
  }
  if (!rank) {
    throw InvalidArgument(
        "rendezvous: no rank (--rank, RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID)");
  }
  // Gloo ranks are ints; 2^16 workers is far beyond any Gloo deployment.
  c.world_size = static_cast<int>(parse_int(*world, 1, 65536));
  c.rank = static_cast<int>(parse_int(*rank, 0, 65535));
  // Rank and world size from two different launchers' variables (say RANK with
  // SLURM_NTASKS) means a stale or half-set environment: refuse rather than guess.
  const auto family = [](const std::string& name) -> int {
    if (name == "RANK" || name == "WORLD_SIZE") return 0;
    if (name.starts_with("OMPI_")) return 1;
    if (name.starts_with("SLURM_")) return 2;
    return -1;  // a flag: combines with anything
  };
  if (family(rank->name) >= 0 && family(world->name) >= 0 &&
      family(rank->name) != family(world->name)) {
    throw InvalidArgument("rendezvous: inconsistent environment: rank from " + rank->name +
                          " but world size from " + world->name);
  }
  if (c.rank >= c.world_size) {
    throw InvalidArgument("rendezvous: rank " + std::to_string(c.rank) + " (" + rank->name +
                          ") >= world size " + std::to_string(c.world_size) + " (" + world->name +
                          ")");
  }

  const auto addr = pick(flags.master_addr, "--master-addr", env, {"MASTER_ADDR"});
  const auto port = pick(flags.master_port, "--master-port", env, {"MASTER_PORT"});
  if (c.world_size > 1 && !addr) {
    throw InvalidArgument("rendezvous: world size " + std::to_string(c.world_size) +
                          " needs a master address (--master-addr or MASTER_ADDR)");
  }
  if (c.world_size > 1 && !port) {
    throw InvalidArgument("rendezvous: world size " + std::to_string(c.world_size) +
                          " needs a master port (--master-port or MASTER_PORT)");
  }
  if (addr) {
    if (addr->value.empty()) throw InvalidArgument("rendezvous: " + addr->name + " is empty");
    c.master_addr = addr->value;
  }
  if (port) c.master_port = static_cast<std::uint16_t>(parse_int(*port, 1, 65535));

  if (const auto t = pick(flags.timeout_ms, "--timeout-ms", env, {"GRADCOMP_TIMEOUT_MS"})) {
    c.timeout = std::chrono::milliseconds(parse_int(*t, 1, 24LL * 3600 * 1000));
  }
  if (const auto i = pick(flags.interface, "--interface", env, {"GLOO_SOCKET_IFNAME"})) {
    c.interface = i->value;
  }
  return c;
}

RendezvousConfig rendezvous_from_env(const RendezvousFlags& flags) {
  Environment env;
  for (const char* key : {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                          "SLURM_PROCID", "SLURM_NTASKS", "MASTER_ADDR", "MASTER_PORT",
                          "GRADCOMP_TIMEOUT_MS", "GLOO_SOCKET_IFNAME"}) {
    if (const char* v = std::getenv(key)) env.emplace(key, v);
  }
  return rendezvous_from_env(flags, env);
}

}  // namespace gradcomp::dist
