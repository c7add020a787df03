#include "gradcomp/advise/collectives.h"

#include <algorithm>
#include <cmath>

namespace gradcomp::advise {

namespace {
double rate(const Link& link) { return link.bandwidth * link.efficiency; }
// Latency steps of an allgather (half of an allreduce's).
double steps(int workers, Algorithm a) {
  if (a == Algorithm::kHalvingDoubling) return std::ceil(std::log2(static_cast<double>(workers)));
  return workers - 1.0;
}
}  // namespace

double allreduce_bytes(double bytes, int workers) {
  if (workers <= 1 || bytes <= 0) return 0.0;
  const double w = workers;
  return 2.0 * (w - 1.0) / w * bytes;
}

double allreduce_seconds(double bytes, int workers, const Link& link) {
  if (workers <= 1 || bytes <= 0) return 0.0;
  return allreduce_bytes(bytes, workers) / rate(link) +
         2.0 * steps(workers, link.algorithm) * link.latency + link.collective_overhead;
}

double allgather_bytes(double max_message_bytes, int workers) {
  if (workers <= 1 || max_message_bytes <= 0) return 0.0;
  return (workers - 1.0) * max_message_bytes;
}

double allgather_seconds(double max_message_bytes, int workers, const Link& link) {
  if (workers <= 1 || max_message_bytes <= 0) return 0.0;
  return allgather_bytes(max_message_bytes, workers) / rate(link) +
         steps(workers, link.algorithm) * link.latency + link.collective_overhead;
}

double ps_seconds(double push_bytes, double pull_bytes, int workers, int servers,
                  const Link& link) {
  if (push_bytes <= 0 && pull_bytes <= 0) return 0.0;
  const double fan_in = std::max(1.0, static_cast<double>(workers) / std::max(1, servers));
  return fan_in * (push_bytes + pull_bytes) / rate(link) + 2.0 * link.latency +
         link.collective_overhead;
}

}  // namespace gradcomp::advise
