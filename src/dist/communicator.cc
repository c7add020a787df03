// The Communicator over c10d's Gloo collectives (a ProcessGroupGloo of its own, or the
// Gloo backend of a group someone else created: process_group.h), and the Store handles
// around c10d's TCPStore / HashStore / PrefixStore. This is the only file of gradcomp_dist
// that includes c10d (and so the only slow one to compile: it gets a precompiled header);
// what differs between torch 1.13 and 2.x is in c10d_compat.h.
//
// Every collective wraps caller memory with at::from_blob (no copy), is issued on the
// process group, and is waited for with the configured timeout. Gloo's own operations
// use the same timeout (Options::timeout), so a silent peer ends the operation from
// either side; a dead peer closes its sockets and Gloo fails the operation at once.
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <c10/util/Logging.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "c10d_compat.h"
#include "gradcomp/dist/communicator.h"
#include "gradcomp/dist/process_group.h"
#include "gradcomp/error.h"

namespace gradcomp::dist {

namespace {

// A write to a connection that a lost peer closed must fail with EPIPE, which Gloo turns
// into an error this rank reports in one line. Under the default disposition SIGPIPE ends
// the process silently instead (exit 141: seen in the network lab, and in CI when a killed
// parameter server's workers wrote to it). A handler the application installed is kept.
void ignore_sigpipe_unless_handled() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    std::signal(SIGPIPE, SIG_IGN);
  }
}

// First line of an exception message, without c10's backtrace.
std::string first_line(const std::exception& e) {
  std::string msg;
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) {
    msg = ce->msg();
  } else {
    msg = e.what();
  }
  const auto nl = msg.find('\n');
  if (nl != std::string::npos) msg.resize(nl);
  // Gloo's messages start with their source location ("[./gloo/transport/tcp/pair.cc:589] ").
  if (msg.starts_with("[")) {
    const auto close = msg.find("] ");
    if (close != std::string::npos && msg.substr(0, close).find("gloo/") != std::string::npos) {
      msg.erase(0, close + 2);
    }
  }
  return msg;
}

// Gloo names a peer by an address ("[127.0.0.1]:40123"), never by rank: the peer's end
// of their connection, or the address the peer listened on. Every rank tells the others
// its own (c10d_compat::local_gloo_addresses; one small allgather when the communicator is
// built), so that a failure's address maps back to a rank.

// The rank whose address `msg` names (the address followed by a non-digit, so that
// port 4012 does not match 40123), or -1 when none does -- or more than one: a
// listening port closed at rendezvous may since be another rank's connection.
int rank_named_in(const std::string& msg,
                  const std::vector<std::pair<std::string, int>>& addresses) {
  int named = -1;
  for (const auto& [address, rank] : addresses) {
    for (auto pos = msg.find(address); pos != std::string::npos; pos = msg.find(address, pos + 1)) {
      const auto end = pos + address.size();
      if (end == msg.size() || std::isdigit(static_cast<unsigned char>(msg[end])) == 0) {
        if (named >= 0 && named != rank) return -1;
        named = rank;
        break;
      }
    }
  }
  return named;
}

bool is_timeout(const std::string& msg) {
  std::string lower = msg;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos;
}

// Runs `f`, turning any exception into a one-line CommError that names `op`.
template <class F>
auto comm_guard(const std::string& op, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const gradcomp::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw CommError(op + ": " + first_line(e));
  }
}

constexpr std::chrono::milliseconds kWaitGrace{2000};

// c10d logs each failed try to reach a TCPStore at ERROR, with a 22-frame stack trace,
// before it throws (torch 2.x: 53 lines for an absent rank 0); gradcomp reports the
// failure in one line (comm_guard). So c10's log is quiet while a store connects, unless
// the user asked for it (TORCH_CPP_LOG_LEVEL). Only c10's own log (torch's pip wheels);
// a torch built with glog (Debian's) keeps its threshold.
class QuietC10Log {
 public:
  QuietC10Log() {
#ifndef C10_USE_GLOG
    if (std::getenv("TORCH_CPP_LOG_LEVEL") == nullptr) {
      saved_ = FLAGS_caffe2_log_level;
      FLAGS_caffe2_log_level = c10::GLOG_FATAL;
      quiet_ = true;
    }
#endif
  }
  ~QuietC10Log() {
#ifndef C10_USE_GLOG
    if (quiet_) FLAGS_caffe2_log_level = saved_;
#endif
  }
  QuietC10Log(const QuietC10Log&) = delete;
  QuietC10Log& operator=(const QuietC10Log&) = delete;

 private:
  [[maybe_unused]] int saved_ = 0;
  [[maybe_unused]] bool quiet_ = false;
};

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1";
}

}  // namespace

// ---- Store ---------------------------------------------------------------------------

struct Store::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  std::uint16_t port = 0;
};

Store::Store(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Store Store::in_process() {
  return Store(std::make_shared<Impl>(Impl{c10::make_intrusive<c10d::HashStore>(), 0}));
}

Store Store::tcp_server(const std::string& host, std::uint16_t port, int world_size,
                        std::chrono::milliseconds timeout) {
  return comm_guard("rendezvous: TCPStore server on " + host + ":" + std::to_string(port), [&] {
    c10d::TCPStoreOptions opts;
    opts.port = port;
    opts.isServer = true;
    opts.numWorkers = static_cast<std::size_t>(world_size);
    opts.waitWorkers = false;  // the process group's own rendezvous waits for everyone
    opts.timeout = timeout;
    auto store = c10::make_intrusive<c10d::TCPStore>(host, opts);
    const auto actual = store->getPort();
    return Store(std::make_shared<Impl>(Impl{std::move(store), actual}));
  });
}

Store Store::tcp_client(const std::string& host, std::uint16_t port,
                        std::chrono::milliseconds timeout) {
  return comm_guard("rendezvous: TCPStore at " + host + ":" + std::to_string(port), [&] {
    c10d::TCPStoreOptions opts;
    opts.port = port;
    opts.isServer = false;
    opts.waitWorkers = false;
    opts.timeout = timeout;
    const QuietC10Log quiet;
    auto store = c10::make_intrusive<c10d::TCPStore>(host, opts);
    return Store(std::make_shared<Impl>(Impl{std::move(store), port}));
  });
}

Store Store::with_prefix(const std::string& prefix) const {
  return Store(std::make_shared<Impl>(
      Impl{c10::make_intrusive<c10d::PrefixStore>(prefix, impl_->store), impl_->port}));
}

std::uint16_t Store::port() const { return impl_->port; }

// ---- Communicator --------------------------------------------------------------------

struct Communicator::Impl {
  c10::intrusive_ptr<c10d_compat::GlooCollectives> pg;
  int rank = 0;
  int world = 1;
  std::chrono::milliseconds timeout{0};
  bool broken = false;
  std::string broken_reason;
  CommCounters counters;
  // allgather_bytes scratch, reused across calls.
  std::vector<std::int64_t> my_size{0};
  std::vector<std::int64_t> sizes;
  std::vector<std::byte> padded;
  std::vector<at::Tensor> in_tensors;
  std::vector<std::vector<at::Tensor>> out_tensors;
  // Each connected peer's address as Gloo's messages print it, with its rank.
  std::vector<std::pair<std::string, int>> peer_addresses;

  // Takes the connected group and learns every peer's addresses (uncounted).
  void adopt(c10::intrusive_ptr<c10d_compat::GlooCollectives> group) {
    pg = std::move(group);
    out_tensors.resize(1);
    if (world == 1) return;
    const std::string mine = c10d_compat::local_gloo_addresses(*pg);
    std::vector<std::byte> all;
    std::vector<std::size_t> offsets;
    allgather_bytes(std::as_bytes(std::span(mine)), all, offsets);
    counters = {};
    for (int r = 0; r < world; ++r) {
      if (r == rank) continue;
      const std::string theirs(reinterpret_cast<const char*>(all.data()) + offsets[r],
                               offsets[r + 1] - offsets[r]);
      for (std::size_t pos = 0, nl; (nl = theirs.find('\n', pos)) != std::string::npos;
           pos = nl + 1) {
        peer_addresses.emplace_back(theirs.substr(pos, nl - pos), r);
      }
    }
  }

  void allgather_bytes(std::span<const std::byte> mine, std::vector<std::byte>& all,
                       std::vector<std::size_t>& offsets);

  std::string where() const {
    return " (on rank " + std::to_string(rank) + " of " + std::to_string(world) + ")";
  }

  // A failure's message, naming the rank it lost when Gloo's text names a peer's
  // address ("lost rank 1: Connection closed by peer [127.0.0.1]:40123"). A timeout
  // names no address: Gloo cannot tell which peer stopped answering, and neither can we
  // (a ring waits on a neighbour that may itself be waiting on the silent rank).
  std::string explain(const std::string& msg) const {
    if (msg.find("lost rank ") != std::string::npos ||
        msg.find("no rank named") != std::string::npos) {
      return msg;  // explained already (an earlier failure, repeated)
    }
    const int lost = rank_named_in(msg, peer_addresses);
    if (lost >= 0) return "lost rank " + std::to_string(lost) + ": " + msg;
    if (is_timeout(msg) && world == 2) {
      // Two ranks: the one that did not answer can only be the other.
      return "lost rank " + std::to_string(1 - rank) + " (no answer within the timeout): " + msg;
    }
    if (is_timeout(msg)) {
      return msg + "; no rank named: a peer stopped answering or a link is down, and Gloo " +
             "does not say which";
    }
    return msg;
  }

  void check_usable(const char* op) const {
    if (broken) {
      throw CommError(std::string(op) + ": communicator unusable after an earlier failure (" +
                      broken_reason + ")");
    }
  }

  // Issues one collective (make_work) and waits for it, with the timeout.
  template <class MakeWork>
  void run(const char* op, MakeWork&& make_work) {
    check_usable(op);
    try {
      c10::intrusive_ptr<c10d::Work> work = make_work();
      // Gloo's own timeout (the same value) normally ends a stuck operation first; the
      // grace keeps us from returning while Gloo's thread may still write our buffers.
      if (!work->wait(timeout + kWaitGrace)) {
        throw CommError("timed out after " + std::to_string((timeout + kWaitGrace).count()) +
                        " ms");
      }
      ++counters.operations;
    } catch (const std::exception& e) {
      broken = true;
      broken_reason = std::string(op) + ": " + explain(first_line(e));
      throw CommError(broken_reason + where());
    }
  }

  void count_ring_allreduce(std::size_t bytes) {
    const auto w = static_cast<std::uint64_t>(world);
    const std::uint64_t moved = 2 * (w - 1) * bytes / w;
    counters.bytes_sent += moved;
    counters.bytes_received += moved;
  }
  void count_allgather(std::size_t bytes_per_rank) {
    const std::uint64_t moved = static_cast<std::uint64_t>(world - 1) * bytes_per_rank;
    counters.bytes_sent += moved;
    counters.bytes_received += moved;
  }
};

Communicator Communicator::connect(const RendezvousConfig& config) {
  ignore_sigpipe_unless_handled();  // before the store's sockets too
  if (config.world_size == 1) return Communicator(Store::in_process(), config);
  const Store store =
      config.rank == 0 ? Store::tcp_server(config.master_addr, config.master_port,
                                           config.world_size, config.timeout)
                       : Store::tcp_client(config.master_addr, config.master_port, config.timeout);
  return Communicator(store, config);
}

// Ranks started with different world sizes each fail in Gloo's connect, with a message
// about keys or a timeout. So every rank publishes its world size first, and every rank
// but 0 compares its own with rank 0's, naming both. (Rank 0 itself learns of it from
// the failed connect, whose message asks.)
namespace {
void check_world_size(c10d::Store& store, const RendezvousConfig& config) {
  const std::string mine = std::to_string(config.world_size);
  store.set("gradcomp/world_size/" + std::to_string(config.rank),
            std::vector<std::uint8_t>(mine.begin(), mine.end()));
  if (config.rank == 0) return;
  const std::vector<std::uint8_t> got = store.get("gradcomp/world_size/0");
  const std::string theirs(got.begin(), got.end());
  if (theirs != mine) {
    throw InvalidArgument("rendezvous: rank 0 started a world of " + theirs + " ranks, rank " +
                          std::to_string(config.rank) + " a world of " + mine +
                          ": every rank needs the same world size");
  }
}
}  // namespace

Communicator::Communicator(const Store& store, const RendezvousConfig& config)
    : impl_(std::make_unique<Impl>()) {
  if (config.world_size < 1 || config.rank < 0 || config.rank >= config.world_size) {
    throw InvalidArgument("communicator: rank " + std::to_string(config.rank) +
                          " outside world size " + std::to_string(config.world_size));
  }
  if (config.timeout.count() <= 0) {
    throw InvalidArgument("communicator: timeout must be positive, got " +
                          std::to_string(config.timeout.count()) + " ms");
  }
  ignore_sigpipe_unless_handled();
  impl_->rank = config.rank;
  impl_->world = config.world_size;
  impl_->timeout = config.timeout;
  const std::string op = "rendezvous: Gloo group of " + std::to_string(config.world_size) +
                         " as rank " + std::to_string(config.rank);
  const auto connect = [&] {
    const QuietC10Log quiet;  // Gloo's connect failures log at ERROR before they throw
    auto options = c10d::ProcessGroupGloo::Options::create(config.timeout);
    if (!config.interface.empty()) {
      options->devices.push_back(
          c10d::ProcessGroupGloo::createDeviceForInterface(config.interface));
    } else if (is_loopback(config.master_addr)) {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store.impl()->store, config.rank,
                                                       config.world_size, options);
  };
  if (config.world_size > 1) {
    comm_guard("rendezvous: the world size", [&] {
      check_world_size(*store.impl()->store, config);
      return 0;
    });
  }
  try {
    impl_->adopt(comm_guard(op, connect));
  } catch (const CommError& e) {
    // What the ranks see differs with what went wrong (a timeout waiting for a rank's
    // address, a connect timeout); the causes are few.
    throw CommError(std::string(e.what()) +
                    " (did every rank start within the timeout, with the same world size?)");
  }
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Communicator communicator_over(c10::intrusive_ptr<c10d::ProcessGroup> group,
                               std::chrono::milliseconds timeout) {
  if (!group) throw InvalidArgument("communicator: no process group");
  if (timeout.count() <= 0) {
    throw InvalidArgument("communicator: timeout must be positive, got " +
                          std::to_string(timeout.count()) + " ms");
  }
  ignore_sigpipe_unless_handled();
  auto impl = std::make_unique<Communicator::Impl>();
  impl->rank = group->getRank();
  impl->world = group->getSize();
  impl->timeout = timeout;
  impl->adopt(c10d_compat::gloo_collectives_of(group));
  return Communicator(std::move(impl));
}

Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->rank; }
int Communicator::world_size() const { return impl_->world; }
std::chrono::milliseconds Communicator::timeout() const { return impl_->timeout; }

void Communicator::allreduce_sum(std::span<float> data) {
  // A world of one sums nothing: Gloo would still copy the buffer (about 5 ms per step
  // for the 14 MB MLP gradient), which the network lab's compute floor must not count.
  if (data.empty() || impl_->world == 1) return;
  std::vector<at::Tensor> t{at::from_blob(data.data(), {static_cast<std::int64_t>(data.size())},
                                          at::TensorOptions().dtype(at::kFloat))};
  impl_->run("allreduce_sum", [&] { return impl_->pg->allreduce(t); });
  impl_->count_ring_allreduce(data.size_bytes());
}

void Communicator::allreduce_sum_f16(std::span<std::uint16_t> data) {
  if (data.empty() || impl_->world == 1) return;
  std::vector<at::Tensor> t{at::from_blob(data.data(), {static_cast<std::int64_t>(data.size())},
                                          at::TensorOptions().dtype(at::kHalf))};
  impl_->run("allreduce_sum_f16", [&] { return impl_->pg->allreduce(t); });
  impl_->count_ring_allreduce(data.size_bytes());
}

void Communicator::allgather_bytes(std::span<const std::byte> mine, std::vector<std::byte>& all,
                                   std::vector<std::size_t>& offsets) {
  impl_->allgather_bytes(mine, all, offsets);
}

void Communicator::Impl::allgather_bytes(std::span<const std::byte> mine,
                                         std::vector<std::byte>& all,
                                         std::vector<std::size_t>& offsets) {
  Impl& im = *this;
  const auto w = static_cast<std::size_t>(im.world);
  im.sizes.resize(w);
  offsets.resize(w + 1);

  // Round 1: every rank's size (8 bytes each).
  im.my_size[0] = static_cast<std::int64_t>(mine.size());
  const auto long_opts = at::TensorOptions().dtype(at::kLong);
  im.in_tensors.assign(1, at::from_blob(im.my_size.data(), {1}, long_opts));
  im.out_tensors[0].clear();
  for (std::size_t r = 0; r < w; ++r) {
    im.out_tensors[0].push_back(at::from_blob(im.sizes.data() + r, {1}, long_opts));
  }
  im.run("allgather_bytes (sizes)",
         [&] { return im.pg->allgather(im.out_tensors, im.in_tensors); });
  im.count_allgather(sizeof(std::int64_t));

  std::size_t max_size = 0;
  for (std::size_t r = 0; r < w; ++r) {
    if (im.sizes[r] < 0) {
      im.broken = true;
      im.broken_reason = "allgather_bytes: rank " + std::to_string(r) + " sent size " +
                         std::to_string(im.sizes[r]);
      throw CommError(im.broken_reason + im.where());
    }
    max_size = std::max(max_size, static_cast<std::size_t>(im.sizes[r]));
  }
  if (static_cast<std::size_t>(im.sizes[static_cast<std::size_t>(im.rank)]) != mine.size()) {
    throw CommError("allgather_bytes: size exchange returned a wrong size for this rank" +
                    im.where());
  }

  // Round 2: buffers padded to the largest, skipped when everything is empty.
  all.resize(w * max_size);
  if (max_size > 0) {
    im.padded.resize(max_size);
    if (!mine.empty()) std::memcpy(im.padded.data(), mine.data(), mine.size());
    std::memset(im.padded.data() + mine.size(), 0, max_size - mine.size());
    const auto byte_opts = at::TensorOptions().dtype(at::kByte);
    const auto len = static_cast<std::int64_t>(max_size);
    im.in_tensors.assign(1, at::from_blob(im.padded.data(), {len}, byte_opts));
    im.out_tensors[0].clear();
    for (std::size_t r = 0; r < w; ++r) {
      im.out_tensors[0].push_back(at::from_blob(all.data() + r * max_size, {len}, byte_opts));
    }
    im.run("allgather_bytes", [&] { return im.pg->allgather(im.out_tensors, im.in_tensors); });
    im.count_allgather(max_size);
  }
  im.in_tensors.clear();
  im.out_tensors[0].clear();

  // Compact in place: rank r's bytes move down from r*max_size (never overlapping
  // forward, so memmove in rank order is safe).
  std::size_t pos = 0;
  for (std::size_t r = 0; r < w; ++r) {
    offsets[r] = pos;
    const auto sz = static_cast<std::size_t>(im.sizes[r]);
    if (sz > 0 && pos != r * max_size)
      std::memmove(all.data() + pos, all.data() + r * max_size, sz);
    pos += sz;
  }
  offsets[w] = pos;
  all.resize(pos);
}

void Communicator::broadcast_bytes(std::span<std::byte> data, int root) {
  if (root < 0 || root >= impl_->world) {
    throw InvalidArgument("broadcast_bytes: root " + std::to_string(root) + " >= world size " +
                          std::to_string(impl_->world));
  }
  if (data.empty()) return;
  std::vector<at::Tensor> t{at::from_blob(data.data(), {static_cast<std::int64_t>(data.size())},
                                          at::TensorOptions().dtype(at::kByte))};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  impl_->run("broadcast_bytes", [&] { return impl_->pg->broadcast(t, opts); });
  const auto w = static_cast<std::uint64_t>(impl_->world);
  if (impl_->rank == root) {
    impl_->counters.bytes_sent += (w - 1) * data.size();
  } else {
    impl_->counters.bytes_received += data.size();
  }
}

void Communicator::barrier() {
  impl_->run("barrier", [&] { return impl_->pg->barrier(); });
}

// ---- Point to point --------------------------------------------------------------------

struct P2PRequest::Impl {
  Communicator::Impl* owner = nullptr;
  c10::intrusive_ptr<c10d::Work> work;
  std::vector<at::Tensor> tensors;
  std::string what;  // "send to rank 3 (tag 2, 120 bytes)"
  std::size_t bytes = 0;
  bool is_send = false;
};

P2PRequest::P2PRequest() = default;
P2PRequest::P2PRequest(P2PRequest&&) noexcept = default;
P2PRequest& P2PRequest::operator=(P2PRequest&&) noexcept = default;
P2PRequest::~P2PRequest() {
  if (impl_ && impl_->work) {
    // Never waited for (an exception unwound past it): stop Gloo from completing into
    // memory the caller is about to release, and refuse further use of the group.
    try {
      impl_->work->abort();
    } catch (...) {
    }
    if (impl_->owner != nullptr && !impl_->owner->broken) {
      impl_->owner->broken = true;
      impl_->owner->broken_reason = impl_->what + " abandoned before completion";
    }
  }
}
bool P2PRequest::pending() const { return impl_ && impl_->work; }

namespace {

void check_peer(const char* op, int peer, int tag, int world, int rank) {
  if (peer < 0 || peer >= world || peer == rank) {
    throw InvalidArgument(std::string(op) + ": peer rank " + std::to_string(peer) +
                          " invalid (world size " + std::to_string(world) + ", this rank " +
                          std::to_string(rank) + ")");
  }
  if (tag < 0) throw InvalidArgument(std::string(op) + ": tag " + std::to_string(tag) + " < 0");
}

}  // namespace

P2PRequest Communicator::isend_bytes(int dst, int tag, std::span<const std::byte> data) {
  Impl& im = *impl_;
  check_peer("send_bytes", dst, tag, im.world, im.rank);
  im.check_usable("send_bytes");
  P2PRequest r;
  if (data.empty()) return r;
  r.impl_ = std::make_unique<P2PRequest::Impl>();
  auto& ri = *r.impl_;
  ri.owner = &im;
  ri.bytes = data.size();
  ri.is_send = true;
  ri.what = "send to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ", " +
            std::to_string(data.size()) + " bytes)";
  // Gloo only reads a send buffer; from_blob wants a non-const pointer.
  ri.tensors.push_back(at::from_blob(const_cast<std::byte*>(data.data()),
                                     {static_cast<std::int64_t>(data.size())},
                                     at::TensorOptions().dtype(at::kByte)));
  try {
    ri.work = im.pg->send(ri.tensors, dst, tag);
  } catch (const std::exception& e) {
    im.broken = true;
    im.broken_reason = ri.what + ": " + im.explain(first_line(e));
    ri.work.reset();
    throw CommError(im.broken_reason + im.where());
  }
  return r;
}

P2PRequest Communicator::irecv_bytes(int src, int tag, std::span<std::byte> data) {
  Impl& im = *impl_;
  check_peer("recv_bytes", src, tag, im.world, im.rank);
  im.check_usable("recv_bytes");
  P2PRequest r;
  if (data.empty()) return r;
  r.impl_ = std::make_unique<P2PRequest::Impl>();
  auto& ri = *r.impl_;
  ri.owner = &im;
  ri.bytes = data.size();
  ri.what = "recv from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ", " +
            std::to_string(data.size()) + " bytes)";
  ri.tensors.push_back(at::from_blob(data.data(), {static_cast<std::int64_t>(data.size())},
                                     at::TensorOptions().dtype(at::kByte)));
  try {
    ri.work = im.pg->recv(ri.tensors, src, tag);
  } catch (const std::exception& e) {
    im.broken = true;
    im.broken_reason = ri.what + ": " + im.explain(first_line(e));
    ri.work.reset();
    throw CommError(im.broken_reason + im.where());
  }
  return r;
}

void Communicator::wait(P2PRequest& request) {
  if (!request.pending()) return;
  Impl& im = *impl_;
  auto& ri = *request.impl_;
  try {
    im.check_usable(ri.what.c_str());
    // Point-to-point work completes on Gloo's device thread: no grace needed.
    if (!ri.work->wait(im.timeout)) throw CommError("aborted");
  } catch (const std::exception& e) {
    try {
      ri.work->abort();
    } catch (...) {
    }
    ri.work.reset();
    const std::string reason = ri.what + ": " + im.explain(first_line(e));
    if (!im.broken) {
      im.broken = true;
      im.broken_reason = reason;
    }
    throw CommError(reason + im.where());
  }
  ri.work.reset();
  ++im.counters.operations;
  (ri.is_send ? im.counters.bytes_sent : im.counters.bytes_received) += ri.bytes;
}

void Communicator::send_bytes(int dst, int tag, std::span<const std::byte> data) {
  P2PRequest r = isend_bytes(dst, tag, data);
  wait(r);
}

void Communicator::recv_bytes(int src, int tag, std::span<std::byte> data) {
  P2PRequest r = irecv_bytes(src, tag, data);
  wait(r);
}

int Communicator::recv_bytes_any(int tag, std::span<std::byte> data) {
  Impl& im = *impl_;
  if (data.empty()) throw InvalidArgument("recv_bytes_any: empty buffer");
  if (tag < 0) throw InvalidArgument("recv_bytes_any: tag " + std::to_string(tag) + " < 0");
  const std::string what = "recv from any rank (tag " + std::to_string(tag) + ", " +
                           std::to_string(data.size()) + " bytes)";
  im.check_usable(what.c_str());
  std::vector<at::Tensor> t{at::from_blob(data.data(), {static_cast<std::int64_t>(data.size())},
                                          at::TensorOptions().dtype(at::kByte))};
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = im.pg->recvAnysource(t, tag);
    if (!work->wait(im.timeout)) throw CommError("aborted");
  } catch (const std::exception& e) {
    if (work) {
      try {
        work->abort();
      } catch (...) {
      }
    }
    im.broken = true;
    im.broken_reason = what + ": " + im.explain(first_line(e));
    throw CommError(im.broken_reason + im.where());
  }
  ++im.counters.operations;
  im.counters.bytes_received += data.size();
  return work->sourceRank();
}

CommCounters Communicator::counters() const { return impl_->counters; }

CommCounters Communicator::take_counters() { return std::exchange(impl_->counters, {}); }

}  // namespace gradcomp::dist
