// What differs between the c10d of Debian's torch 1.13 and of torch 2.x, in one place
// (private to gradcomp_dist; the communicator is its only user).
//
// 1.13: ProcessGroupGloo *is* a ProcessGroup, and collectives are issued on the group.
// 2.x:  ProcessGroup is a front end that dispatches each collective to the backend
//       registered for the tensors' device (`init_process_group("cpu:gloo,cuda:nccl")`
//       registers two); ProcessGroupGloo is such a backend (c10d::Backend).
// gradcomp's collectives are CPU byte and float buffers carried by Gloo, so on 2.x it
// issues them on the group's CPU backend, which must be Gloo, and on 1.13 on the group,
// which must be a ProcessGroupGloo. Both expose the same collective calls.
//
// A lost peer is named by rank from the address Gloo's message gives: each rank publishes
// the addresses a message may name for it (local_gloo_addresses). Torch 2.x's Gloo listens
// on one socket per device for the whole run, so this process's TCP endpoints
// (socket_endpoints.h) hold every such address. Torch 1.13's Gloo listens on one socket per
// pair and closes it once connected, and its messages may name that closed address: those
// are read where Gloo left them, its contexts and its rendezvous keys.
#pragma once

#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#if TORCH_VERSION_MAJOR < 2
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <gloo/context.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/address.h>
#endif

#include <cstddef>
#include <exception>
#include <string>
#include <vector>

#include "gradcomp/error.h"
#include "socket_endpoints.h"

namespace gradcomp::dist::c10d_compat {

#if TORCH_VERSION_MAJOR >= 2
using GlooCollectives = c10d::Backend;
#else
using GlooCollectives = c10d::ProcessGroup;
#endif

inline constexpr const char* kUseGloo =
    "gradcomp exchanges CPU buffers over Gloo: create the group with a Gloo backend for CPU "
    "tensors, e.g. init_process_group(\"cpu:gloo,cuda:nccl\") or dist.new_group(backend=\"gloo\")";

// The object gradcomp issues its collectives on: the group's Gloo backend for CPU
// tensors. Throws InvalidArgument, naming what the group has and what to do, when the
// group has no such backend (an NCCL-only group).
inline c10::intrusive_ptr<GlooCollectives> gloo_collectives_of(
    const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
#if TORCH_VERSION_MAJOR >= 2
  c10::intrusive_ptr<c10d::Backend> backend;
  try {
    backend = group->getBackend(c10::DeviceType::CPU);
  } catch (const std::exception&) {
    // no backend for CPU tensors: refused below, naming the group's backend
  }
  if (!backend || backend->getBackendName() != "gloo") {
    throw InvalidArgument("communicator: the process group's backend is '" +
                          group->getBackendName() + "', with " +
                          (backend ? "'" + backend->getBackendName() + "'" : "no backend") +
                          " for CPU tensors; " + kUseGloo);
  }
  return backend;
#else
  if (group->getBackendName() != "gloo") {
    throw InvalidArgument("communicator: the process group's backend is '" +
                          group->getBackendName() + "'; " + kUseGloo);
  }
  return group;
#endif
}

#if TORCH_VERSION_MAJOR < 2
namespace detail {
// Gloo's contexts are a protected member of ProcessGroupGloo; a pointer to member formed
// through a derived class is the access the language grants (never instantiated).
struct GlooContextsAccess : c10d::ProcessGroupGloo {
  static auto contexts() { return &GlooContextsAccess::contexts_; }
};
}  // namespace detail
#endif

// This rank's addresses as Gloo's messages may print them, one a line; empty where none
// can be read (a peer then names no rank rather than a wrong one).
inline std::string local_gloo_addresses([[maybe_unused]] GlooCollectives& group) {
#if TORCH_VERSION_MAJOR >= 2
  return local_tcp_endpoints();
#else
  std::string out;
  auto* gloo = dynamic_cast<c10d::ProcessGroupGloo*>(&group);
  if (gloo == nullptr) return out;
  const auto& contexts = gloo->*detail::GlooContextsAccess::contexts();
  try {
    // Each pair's own address (its listening socket, or the peer's connection's end).
    for (const auto& context : contexts) {
      if (!context) continue;
      for (int r = 0; r < context->size; ++r) {
        if (r == context->rank) continue;
        const auto* pair = context->getPair(r).get();
        if (pair != nullptr) out += pair->address().str() + "\n";
      }
    }
  } catch (const std::exception&) {
    return {};  // not connected as expected: name no peer rather than a wrong one
  }
  // The listening addresses this rank published for Gloo's rendezvous: key
  // "<context>/<rank>" (gloo::rendezvous::Context::connectFullMesh), one tcp::Address
  // per peer.
  try {
    for (std::size_t d = 0; d < contexts.size(); ++d) {
      if (!contexts[d] || contexts[d]->size < 2) continue;
      const std::vector<char> all =
          gloo->_getStore()->get(std::to_string(d) + "/" + std::to_string(contexts[d]->rank));
      const std::size_t each = all.size() / static_cast<std::size_t>(contexts[d]->size - 1);
      for (std::size_t at = 0; each > 0 && at + each <= all.size(); at += each) {
        const std::vector<char> bytes(all.begin() + static_cast<std::ptrdiff_t>(at),
                                      all.begin() + static_cast<std::ptrdiff_t>(at + each));
        out += gloo::transport::tcp::Address(bytes).str() + "\n";
      }
    }
  } catch (const std::exception&) {
    // Not Gloo's TCP layout: the connections' own ends still name most failures.
  }
  return out;
#endif
}

}  // namespace gradcomp::dist::c10d_compat
