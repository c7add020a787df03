// The fp32 sum that every allreduce reducer and scheme runs each step: the buckets sent
// dense this step (BucketRef::compressed == false, the dense reducer, a scheme's warm-up,
// a dense fallback) ride one fp32 allreduce together with the floats the method sums
// beside them (PowerSGD's P factors, the count sketches, linear codec regions), and come
// back as the mean, sum * (1/W).
//
// Slots lie in the order they are added, and every caller adds them in bucket order.
// That order is part of the result: Gloo's ring allreduce sums each chunk of the buffer
// starting from a different rank, so with three or more workers the rounding of an
// element depends on where it sits.
//
// One step:
//   packing.begin(buckets.size());
//   per bucket: packing.add_dense(grad), or fill packing.add_summed(count)
//   comm.allreduce_sum(packing.pack());
//   read the summed slots; packing.write_means(inv_w);
// When every bucket of the step is dense and they lie back to back in memory (the
// trainer's layout), pack() hands them over as they are: summed in place, with no copy.
// The buffer is allocated at the first step that needs it, so a steady-state step
// allocates nothing. The parameter server has no such buffer (a dense key travels as a
// record of its own, and the server adds the workers' records in worker order, not in a
// ring); it shares only sum_to_mean. Internal to gradcomp_dist.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace gradcomp::dist {

// sum * (1/W) in place: a summed gradient becomes the mean. Every reducer, the
// exchanger's dense path and the parameter server multiply by the reciprocal (never
// divide by W), so their means agree to the bit.
void sum_to_mean(std::span<float> sum, float inv_w);

class DensePacking {
 public:
  // capacity: the most floats one step adds (dense buckets and summed slots together).
  explicit DensePacking(std::size_t capacity = 0) : capacity_(capacity) {}

  // Starts a step of `buckets` buckets; forgets the previous step's slots.
  void begin(std::size_t buckets);

  // The bucket goes in the sum as it is: copied in by pack(), its mean written back into
  // it by write_means().
  void add_dense(std::span<float> grad);

  // `count` floats of the buffer for the caller to fill before the sum and read after
  // it; valid until the next begin().
  std::span<float> add_summed(std::size_t count);

  // What to allreduce: every slot, dense buckets copied in; or, when in_place(), the
  // buckets themselves.
  std::span<float> pack();

  // True when every bucket of the step was added dense and each starts where the one
  // before ends.
  bool in_place() const;

  // Every dense bucket = its slot's sum * (1/W). After the allreduce of pack().
  void write_means(float inv_w);

 private:
  struct DenseSlot {
    std::span<float> grad;
    std::size_t offset = 0;
  };

  // Throws Error when `count` more floats would pass the capacity (a caller's sizing bug).
  void check_room(std::size_t count) const;

  // The buffer, allocated at its full capacity on first use.
  float* buffer();

  std::size_t capacity_;
  std::vector<float> buffer_;
  std::vector<DenseSlot> dense_;
  std::size_t size_ = 0;       // floats added this step
  std::size_t buckets_ = 0;    // this step's bucket count
  bool back_to_back_ = false;  // every slot so far dense, each after the one before
};

}  // namespace gradcomp::dist
