// The cost of one collective on an alpha-beta link (docs/cost-model.md): W workers, each
// with its own link of `bandwidth` bytes/s in each direction and `latency` seconds one
// way, plus a constant per collective for Gloo over TCP (scheduling, the size exchange,
// waking the peer threads), fit from the network lab. Torch-free.
#pragma once

namespace gradcomp::advise {

// The collectives' algorithm. Gloo (c10d's CPU backend, what gradcomp runs on) uses the
// ring: gloo/allreduce.cc runs it when no algorithm is given, and c10d gives none.
// Halving-doubling (Rabenseifner's allreduce, recursive-doubling allgather) is what MPI and
// NCCL-like stacks use for small messages: the same bytes, log2(W) latency steps.
enum class Algorithm { kRing, kHalvingDoubling };

struct Link {
  double bandwidth = 125e6;          // bytes per second, each direction (1 Gbit/s)
  double latency = 0.0;              // alpha: seconds, one way
  double collective_overhead = 0.0;  // seconds per collective, added once
  // Share of the nominal bandwidth a bulk transfer gets (TCP/IP headers, shaping, Gloo's
  // gaps between chunks): every B/beta below is B / (efficiency * bandwidth).
  double efficiency = 1.0;
  Algorithm algorithm = Algorithm::kRing;
};

// Gloo's ring (gloo/allreduce.cc and gloo/allgather.cc in the libgloo c10d links) moves a
// buffer as segments with at most two in flight per peer, and the TCP transport sends a
// segment only once the receiver's notice that it is ready has arrived (tcp/pair.cc). A
// pass of n segments of s bytes therefore takes the longer of its wire time plus one
// notice-and-data round, and ceil(n/2) such rounds with a segment each:
//   ring_pass(n, s) = max(n s/beta + 2 alpha, ceil(n/2) (2 alpha + s/beta)).
// With alpha -> 0 it is the textbook n s/beta; a small buffer costs ~n alpha, twice the
// textbook ring's (W-1) alpha per pass, because of the notice.
double ring_pass_seconds(double segments, double segment_bytes, const Link& link);

// Gloo's segment cap in the ring allreduce (AllreduceOptions::kMaxSegmentSize).
inline constexpr double kGlooMaxSegmentBytes = 1024.0 * 1024.0;

// Ring allreduce of a B-byte buffer: N = W ceil(max(ceil(B / 1 MiB), 2W) / W) segments of
// B/N; a reduce-scatter pass and an allgather pass of (W-1) N/W segments each:
//   2 ring_pass((W-1) N/W, B/N) (+ overhead), whose bytes are 2(W-1)/W * B/beta.
// Halving-doubling: the same bytes, 2 ceil(log2 W) alpha. 0 for W = 1 or B = 0.
double allreduce_seconds(double bytes, int workers, const Link& link);
// Bytes one worker sends in it: 2(W-1)/W * B.
double allreduce_bytes(double bytes, int workers);

// Ring allgather of messages of at most m bytes (Gloo pads to the largest): one pass of
// 2(W-1) half messages, ring_pass(2(W-1), m/2) (+ overhead), whose bytes are
// (W-1) m/beta. Recursive doubling: the same bytes, ceil(log2 W) alpha.
double allgather_seconds(double max_message_bytes, int workers, const Link& link);
// Bytes one worker sends in it: (W-1) m.
double allgather_bytes(double max_message_bytes, int workers);

// The scatter reducer (src/dist/scatter_reducer.cc) for one worker's messages of m bytes:
// two point-to-point phases, each sending (W-1)/W m over the worker's link and receiving as
// much. Every receive is posted before the first send, so phase 1 pays a ready notice and
// the data (2 alpha), phase 2, whose notices arrived meanwhile, only the data (alpha):
//   3 alpha + 2 (W-1)/W m / beta (+ overhead), whatever the algorithm.
double scatter_seconds(double message_bytes, int workers, const Link& link);
// Bytes one worker sends in it: 2(W-1)/W * m.
double scatter_bytes(double message_bytes, int workers);

// Synchronous parameter server with S servers on links like the workers': each worker
// pushes `push_bytes` (push_bytes/S to each server) and pulls `pull_bytes`; a server's
// link carries W * push_bytes / S in and W * pull_bytes / S out, so each direction costs
// max(worker link, server link):
//   max(1, W/S) * (push + pull) / beta + 2 alpha (+ overhead).
double ps_seconds(double push_bytes, double pull_bytes, int workers, int servers, const Link& link);

}  // namespace gradcomp::advise
