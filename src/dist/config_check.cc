#include "gradcomp/dist/config_check.h"

#include <vector>

#include "gradcomp/error.h"

namespace gradcomp::dist {

void check_ranks_agree(Communicator& comm, const ConfigFields& mine) {
  const std::vector<std::byte> bytes = serialize_config(mine);
  std::vector<std::byte> all;
  std::vector<std::size_t> offsets;
  comm.allgather_bytes(bytes, all, offsets);
  std::vector<ConfigFields> per_rank;
  per_rank.reserve(static_cast<std::size_t>(comm.world_size()));
  for (int r = 0; r < comm.world_size(); ++r) {
    const auto i = static_cast<std::size_t>(r);
    per_rank.push_back(parse_config(
        std::span<const std::byte>(all.data() + offsets[i], offsets[i + 1] - offsets[i]), r));
  }
  if (const auto line = find_config_disagreement(per_rank)) throw InvalidArgument(*line);
}

}  // namespace gradcomp::dist
