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
#pragma once

#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <exception>
#include <string>

#include "gradcomp/error.h"

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

}  // namespace gradcomp::dist::c10d_compat
