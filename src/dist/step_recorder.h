// The bookkeeping of one Reducer::reduce call, shared by every reducer: the time of
// each phase and, at finish(), the bytes the communicator moved during the step.
// Phases follow one another: each encoded() / communicated() / decoded() closes the
// phase that began at the previous call (or at construction) and books its time.
// Internal to gradcomp_dist.
#pragma once

#include <chrono>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/reducer.h"

namespace gradcomp::dist {

class StepRecorder {
 public:
  StepRecorder(const Communicator& comm, ReduceStats& stats)
      : comm_(comm), stats_(stats), before_(comm.counters()), t0_(Clock::now()) {}

  void encoded() { lap(stats_.encode_seconds); }
  void communicated() { lap(stats_.comm_seconds); }
  void decoded() { lap(stats_.decode_seconds); }

  // Books the step's bytes (the communicator's counters since construction) and the step.
  void finish() {
    const CommCounters after = comm_.counters();
    stats_.bytes_sent += after.bytes_sent - before_.bytes_sent;
    stats_.bytes_received += after.bytes_received - before_.bytes_received;
    ++stats_.steps;
  }

 private:
  using Clock = std::chrono::steady_clock;

  void lap(double& phase) {
    const Clock::time_point now = Clock::now();
    phase += std::chrono::duration<double>(now - t0_).count();
    t0_ = now;
  }

  const Communicator& comm_;
  ReduceStats& stats_;
  CommCounters before_;
  Clock::time_point t0_;
};

}  // namespace gradcomp::dist
