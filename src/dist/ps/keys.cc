// plan_keys (see gradcomp/dist/ps.h) and the topology / downlink names.
#include <algorithm>
#include <numeric>
#include <string>

#include "gradcomp/dist/ps.h"
#include "gradcomp/error.h"

namespace gradcomp::dist {

Method PsConfig::method(const CodecRegistry& registry) const {
  return Method::parse(compressor, {.topology = topology, .downlink = downlink}, registry);
}

std::string PsConfig::role_of(int rank) const {
  if (rank >= workers && rank < workers + servers) {
    return "server " + std::to_string(rank - workers) + " (rank " + std::to_string(rank) + ")";
  }
  if (rank >= 0 && rank < workers) {
    return "worker " + std::to_string(rank) + " (rank " + std::to_string(rank) + ")";
  }
  return "rank " + std::to_string(rank) + " (no role: outside " + std::to_string(workers) +
         " workers + " + std::to_string(servers) + " servers)";
}

std::vector<PsKey> plan_keys(std::span<const BucketShape> buckets, int servers,
                             std::size_t split_elements) {
  if (servers < 1) throw InvalidArgument("plan_keys: servers " + std::to_string(servers) + " < 1");
  const auto s_count = static_cast<std::size_t>(servers);
  std::vector<PsKey> keys;
  std::vector<std::size_t> load(s_count, 0);
  std::vector<std::size_t> whole;  // indices into `keys` still to place
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const BucketShape& shape = buckets[b];
    const bool split = servers > 1 && shape.numel > split_elements && shape.numel >= s_count;
    const std::size_t parts = split ? s_count : 1;
    const std::size_t base = shape.numel / parts;
    const std::size_t extra = shape.numel % parts;
    const std::size_t cols = shape.rows > 0 ? shape.numel / shape.rows : 0;
    std::size_t offset = 0;
    for (std::size_t j = 0; j < parts; ++j) {
      PsKey k;
      k.bucket = b;
      k.bucket_id = shape.id;
      k.part = static_cast<std::uint32_t>(j);
      k.parts = static_cast<std::uint32_t>(parts);
      k.offset = offset;
      k.numel = base + (j < extra ? 1 : 0);
      k.compressible = shape.compressible;
      if (cols > 0 && shape.rows * cols == shape.numel && k.offset % cols == 0 &&
          k.numel % cols == 0) {
        k.rows = static_cast<std::uint32_t>(k.numel / cols);
      }
      if (split) {
        // Part j of bucket b on server (j + b) mod S: the longer first parts rotate
        // over the servers, so split buckets load every server within a few elements.
        k.server = static_cast<int>((j + b) % s_count);
        load[static_cast<std::size_t>(k.server)] += k.numel;
      } else {
        k.server = -1;
        whole.push_back(keys.size());
      }
      offset += k.numel;
      keys.push_back(k);
    }
  }
  // Whole buckets: largest first onto the least-loaded server (lowest index on ties).
  // The server a bucket lands on held at most the average load, so no server ends
  // above total / S + one bucket.
  std::stable_sort(whole.begin(), whole.end(),
                   [&](std::size_t a, std::size_t b) { return keys[a].numel > keys[b].numel; });
  for (std::size_t i : whole) {
    const auto it = std::min_element(load.begin(), load.end());
    keys[i].server = static_cast<int>(it - load.begin());
    *it += keys[i].numel;
  }
  for (std::size_t i = 0; i < keys.size(); ++i) keys[i].id = static_cast<std::uint32_t>(i);
  return keys;
}

}  // namespace gradcomp::dist
