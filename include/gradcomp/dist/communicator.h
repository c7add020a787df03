// The communicator: gradcomp's only door to the network. It wraps a c10d
// ProcessGroupGloo (LibTorch) behind a torch-free interface of flat spans, so that
// reducers, the trainer and the tests compile without c10d headers.
//
// Every operation is blocking and waits at most the configured timeout; a failed peer,
// a closed connection or a timeout becomes gradcomp::CommError with a one-line message
// naming the operation and this rank, and -- when Gloo's message names a peer's address
// -- the rank lost ("allreduce_sum: lost rank 1: Connection closed by peer
// [127.0.0.1]:40123 (on rank 0 of 3)"). A timeout names no peer (Gloo cannot tell which
// one went silent) and says so. To map addresses to ranks, building a communicator over a
// group of more than one rank runs one small allgather (not counted in the counters):
// every rank of the group builds its communicator at the same point. After a CommError the
// communicator is broken: every later operation throws CommError at once (a collective that
// half-ran leaves the group in an unknown state, so nothing may be issued on it again).
//
// Collectives must be issued in the same order, with the same sizes, on every rank
// (Gloo fails or hangs otherwise). Zero-element collectives are never issued: an
// operation on empty spans returns without touching the network, on every rank alike.
//
// Byte accounting. The counters hold the bytes this rank's Gloo algorithms put on
// and take off the wire (payload only: no TCP/Gloo framing), computed from the
// algorithm c10d runs for each operation, with B the operation's buffer in bytes and
// W the world size:
//   allreduce  (ring: reduce-scatter then allgather)   sent = received = 2*(W-1)*B/W
//   allgather  (ring, B = one rank's padded buffer)     sent = received = (W-1)*B
//   broadcast  (counted as a flat fan-out from root)    root sends (W-1)*B, others receive B
//   barrier                                             0
// W = 1 moves nothing. The ring figures are exact up to Gloo's rounding of chunks to
// whole elements (we use floor(2*(W-1)*B/W)); they are what makes compression ratios
// comparable across world sizes. size exchanges of allgather_bytes are counted too.
// Point-to-point messages (the parameter server) count exactly their bytes: a send adds
// its size to bytes_sent, a receive to bytes_received.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace gradcomp::dist {

// Where and how a process joins the group.
struct RendezvousConfig {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";      // host of rank 0's TCPStore
  std::uint16_t master_port = 29500;          // port of rank 0's TCPStore
  std::chrono::milliseconds timeout{60'000};  // rendezvous and every operation
  std::string interface;  // network interface for Gloo (GLOO_SOCKET_IFNAME); empty: by address
};

// Values given on the command line (--rank, --world-size, --master-addr, --master-port,
// --timeout-ms, --interface); unset ones fall back to the environment. Numbers arrive as
// the strings the user typed, so that flags and environment are validated alike.
struct RendezvousFlags {
  std::optional<std::string> rank;
  std::optional<std::string> world_size;
  std::optional<std::string> master_addr;
  std::optional<std::string> master_port;
  std::optional<std::string> timeout_ms;
  std::optional<std::string> interface;
};

using Environment = std::map<std::string, std::string, std::less<>>;

// Resolves a RendezvousConfig, explicit flags first, then the launcher's variables:
//   rank        --rank, RANK (torchrun), OMPI_COMM_WORLD_RANK (mpirun), SLURM_PROCID (Slurm)
//   world size  --world-size, WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS
//   address     --master-addr, MASTER_ADDR; 127.0.0.1 when the world size is 1
//   port        --master-port, MASTER_PORT; 29500 when the world size is 1
//   timeout     --timeout-ms, GRADCOMP_TIMEOUT_MS; 60000
//   interface   --interface, GLOO_SOCKET_IFNAME; empty
// Throws InvalidArgument naming the source on a missing rank or world size, a
// non-numeric or out-of-range value (rank >= world size, port 0 or > 65535), or a
// missing address/port when the world size is above 1.
RendezvousConfig rendezvous_from_env(const RendezvousFlags& flags, const Environment& env);
// The same over the process environment.
RendezvousConfig rendezvous_from_env(const RendezvousFlags& flags = {});

// A c10d key-value store handle (torch-free): what ranks rendezvous through.
class Store {
 public:
  // An in-process store, for one thread per rank in tests.
  static Store in_process();
  // A TCPStore server on host:port (port 0: an ephemeral port, see port()).
  static Store tcp_server(const std::string& host, std::uint16_t port, int world_size,
                          std::chrono::milliseconds timeout);
  // A TCPStore client of a server at host:port.
  static Store tcp_client(const std::string& host, std::uint16_t port,
                          std::chrono::milliseconds timeout);
  // The same store with every key under "prefix/": one group per prefix.
  Store with_prefix(const std::string& prefix) const;

  // The TCP port (TCPStore only; 0 otherwise).
  std::uint16_t port() const;

  struct Impl;
  explicit Store(std::shared_ptr<Impl> impl);
  const std::shared_ptr<Impl>& impl() const { return impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

class Communicator;

// A point-to-point operation in flight (Communicator::isend_bytes / irecv_bytes). The
// buffer it names must stay alive until wait() returns; destroying a request that was
// not waited for aborts it (and the communicator is then unusable, as after a failure).
class P2PRequest {
 public:
  P2PRequest();
  P2PRequest(P2PRequest&&) noexcept;
  P2PRequest& operator=(P2PRequest&&) noexcept;
  ~P2PRequest();
  bool pending() const;

  struct Impl;

 private:
  friend class Communicator;
  std::unique_ptr<Impl> impl_;
};

struct CommCounters {
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t operations = 0;  // collectives actually issued (skipped empty ones excluded)
};

class Communicator {
 public:
  // Joins the group described by config: rank 0 serves a TCPStore on
  // master_addr:master_port, the others connect to it. Throws CommError on timeout.
  static Communicator connect(const RendezvousConfig& config);

  // Joins a group over an existing store; config.master_port is not used, master_addr
  // and interface pick the network device (127.0.0.1 / localhost: the loopback).
  Communicator(const Store& store, const RendezvousConfig& config);

  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  ~Communicator();

  struct Impl;
  // Adopts a connected group (communicator.cc and communicator_over() build Impls).
  explicit Communicator(std::unique_ptr<Impl> impl);

  int rank() const;
  int world_size() const;
  std::chrono::milliseconds timeout() const;

  // data <- elementwise sum over ranks (fp32).
  void allreduce_sum(std::span<float> data);
  // data <- elementwise sum over ranks of IEEE binary16 values (bit patterns), summed by
  // Gloo in fp16 on the wire (2 bytes per element).
  void allreduce_sum_f16(std::span<std::uint16_t> data);

  // Gathers every rank's bytes (sizes may differ, zero included): afterwards rank r's
  // bytes are all[offsets[r], offsets[r+1]) (offsets has W+1 entries). One allgather
  // of the sizes, then -- unless every size is 0 -- one allgather of buffers padded to
  // the largest. `all` and `offsets` are resized (their capacity is reused).
  void allgather_bytes(std::span<const std::byte> mine, std::vector<std::byte>& all,
                       std::vector<std::size_t>& offsets);

  // data <- root's data (same size on every rank).
  void broadcast_bytes(std::span<std::byte> data, int root);

  void barrier();

  // ---- Point to point (c10d ProcessGroupGloo::send / recv / recvAnysource).
  // A message goes to one peer under a tag (>= 0); messages of one (peer, tag) pair
  // arrive in the order they were sent. Both sides must agree on the exact size (the
  // parameter server sends a fixed-size frame that announces each payload), and an
  // empty message is not sent at all, on either side alike. A send completes once the
  // receiver has posted the matching receive (Gloo's rendezvous protocol), so post
  // both directions before waiting when two ranks exchange. Waiting is bounded by the
  // timeout; a failure or timeout throws CommError naming the peer rank and the tag,
  // and leaves the communicator broken.
  void send_bytes(int dst, int tag, std::span<const std::byte> data);
  void recv_bytes(int src, int tag, std::span<std::byte> data);
  // Receives one non-empty message from whichever rank sends first; returns that rank.
  int recv_bytes_any(int tag, std::span<std::byte> data);
  // Non-blocking forms; wait() blocks (with the timeout) until the operation is done.
  P2PRequest isend_bytes(int dst, int tag, std::span<const std::byte> data);
  P2PRequest irecv_bytes(int src, int tag, std::span<std::byte> data);
  void wait(P2PRequest& request);

  // Counters since construction (or the last take_counters()), then reset.
  CommCounters counters() const;
  CommCounters take_counters();

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradcomp::dist
