// Runs one thread per rank, each with its own Communicator over a shared in-process
// store (c10d HashStore; Gloo itself talks TCP over 127.0.0.1), as gloo's and c10d's
// own tests do. Exceptions in a rank thread are rethrown on the caller.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gradcomp/dist/communicator.h"

namespace gradcomp::dist::test {

inline constexpr std::chrono::milliseconds kTestTimeout{10'000};

inline RendezvousConfig local_config(int rank, int world) {
  RendezvousConfig c;
  c.rank = rank;
  c.world_size = world;
  c.master_addr = "127.0.0.1";
  c.timeout = kTestTimeout;
  return c;
}

// Calls body(comm) on `world` threads, one Communicator each; rethrows the first failure.
inline void run_ranks(int world, const std::function<void(Communicator&)>& body) {
  const Store store = Store::in_process();
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        Communicator comm(store, local_config(r, world));
        body(comm);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace gradcomp::dist::test
