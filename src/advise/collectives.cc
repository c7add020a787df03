#include "gradcomp/advise/collectives.h"

#include <algorithm>
#include <cmath>

namespace gradcomp::advise {

namespace {
double rate(const Link& link) { return link.bandwidth * link.efficiency; }
// Halving-doubling's latency steps of an allgather (half of an allreduce's).
double log2_steps(int workers) { return std::ceil(std::log2(static_cast<double>(workers))); }
}  // namespace

double allreduce_bytes(double bytes, int workers) {
  if (workers <= 1 || bytes <= 0) return 0.0;
  const double w = workers;
  return 2.0 * (w - 1.0) / w * bytes;
}

double ring_pass_seconds(double segments, double segment_bytes, const Link& link) {
  if (!(segments > 0) || !(segment_bytes > 0)) return 0.0;
  const double wire = segment_bytes / rate(link);
  const double rounds = std::ceil(segments / 2.0);
  return std::max(segments * wire + 2.0 * link.latency, rounds * (2.0 * link.latency + wire));
}

double allreduce_seconds(double bytes, int workers, const Link& link) {
  if (workers <= 1 || bytes <= 0) return 0.0;
  const double w = workers;
  if (link.algorithm == Algorithm::kHalvingDoubling) {
    return allreduce_bytes(bytes, workers) / rate(link) + 2.0 * log2_steps(workers) * link.latency +
           link.collective_overhead;
  }
  const double wanted = std::max(std::ceil(bytes / kGlooMaxSegmentBytes), 2.0 * w);
  const double segments = w * std::ceil(wanted / w);
  const double per_pass = (w - 1.0) * segments / w;
  return 2.0 * ring_pass_seconds(per_pass, bytes / segments, link) + link.collective_overhead;
}

double allgather_bytes(double max_message_bytes, int workers) {
  if (workers <= 1 || max_message_bytes <= 0) return 0.0;
  return (workers - 1.0) * max_message_bytes;
}

double allgather_seconds(double max_message_bytes, int workers, const Link& link) {
  if (workers <= 1 || max_message_bytes <= 0) return 0.0;
  if (link.algorithm == Algorithm::kHalvingDoubling) {
    return allgather_bytes(max_message_bytes, workers) / rate(link) +
           log2_steps(workers) * link.latency + link.collective_overhead;
  }
  return ring_pass_seconds(2.0 * (workers - 1.0), max_message_bytes / 2.0, link) +
         link.collective_overhead;
}

double scatter_bytes(double message_bytes, int workers) {
  return allreduce_bytes(message_bytes, workers);
}

double scatter_seconds(double message_bytes, int workers, const Link& link) {
  if (workers <= 1 || message_bytes <= 0) return 0.0;
  return scatter_bytes(message_bytes, workers) / rate(link) + 3.0 * link.latency +
         link.collective_overhead;
}

double ps_seconds(double push_bytes, double pull_bytes, int workers, int servers,
                  const Link& link) {
  if (push_bytes <= 0 && pull_bytes <= 0) return 0.0;
  const double fan_in = std::max(1.0, static_cast<double>(workers) / std::max(1, servers));
  return fan_in * (push_bytes + pull_bytes) / rate(link) + 2.0 * link.latency +
         link.collective_overhead;
}

}  // namespace gradcomp::advise
