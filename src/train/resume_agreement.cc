#include "train/resume_agreement.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gradcomp/error.h"
#include "train/checkpoint_file.h"

namespace gradcomp::train {

std::filesystem::path agree_resume_file(dist::Communicator& comm, const JobOptions& o,
                                        int workers) {
  const int rank = comm.rank();
  const bool worker = rank < workers;
  const std::filesystem::path cur = rank_checkpoint_file(o.train.checkpoint_dir, rank);
  const std::filesystem::path prev = previous_checkpoint_file(cur);
  auto step_of = [](const std::filesystem::path& f) -> std::int64_t {
    const std::optional<std::uint64_t> s = checkpoint_step(f);
    return s ? static_cast<std::int64_t>(*s) : -1;
  };
  const std::int64_t mine[2] = {worker ? step_of(cur) : -1, worker ? step_of(prev) : -1};
  std::vector<std::byte> all;
  std::vector<std::size_t> offsets;
  comm.allgather_bytes(std::as_bytes(std::span(mine)), all, offsets);
  std::vector<std::array<std::int64_t, 2>> steps(static_cast<std::size_t>(workers));
  bool any = false;
  for (int r = 0; r < workers; ++r) {
    auto& st = steps[static_cast<std::size_t>(r)];
    std::memcpy(st.data(), all.data() + offsets[static_cast<std::size_t>(r)], sizeof mine);
    any = any || st[0] >= 0 || st[1] >= 0;
  }
  if (!any) return {};
  if (o.topology == dist::Topology::kPsAsync) {
    // Asynchronous workers never share a step while they run (one may finish while
    // another is epochs behind), so each resumes from its own newest checkpoint; the
    // servers resume from theirs and take each worker's clock from its first push.
    if (!worker) return {};
    const auto& me = steps[static_cast<std::size_t>(rank)];
    if (me[0] < 0 && me[1] < 0) return {};
    return me[0] >= me[1] ? cur : prev;
  }
  std::int64_t agreed = -1;
  for (const std::int64_t candidate : steps[0]) {
    if (candidate <= agreed) continue;
    bool everywhere = true;
    for (const auto& st : steps)
      everywhere = everywhere && (st[0] == candidate || st[1] == candidate);
    if (everywhere) agreed = candidate;
  }
  if (agreed < 0) {
    std::string held;
    for (int r = 0; r < workers; ++r) {
      const auto& st = steps[static_cast<std::size_t>(r)];
      held += (r > 0 ? "; rank " : "rank ") + std::to_string(r) + ": ";
      std::string list;
      for (const std::int64_t step : st) {
        if (step >= 0) list += (list.empty() ? "" : ", ") + std::to_string(step);
      }
      held += list.empty() ? "none" : list;
    }
    throw InvalidArgument("--resume: the workers' checkpoints in " +
                          o.train.checkpoint_dir.string() + " share no step (" + held + ")");
  }
  if (!worker) return {};
  const auto& me = steps[static_cast<std::size_t>(rank)];
  return me[0] == agreed ? cur : prev;
}

}  // namespace gradcomp::train
