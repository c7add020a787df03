#include "dense_packing.h"

#include <cstring>
#include <string>

#include "gradcomp/error.h"

namespace gradcomp::dist {

void sum_to_mean(std::span<float> sum, float inv_w) {
  for (float& x : sum) x *= inv_w;
}

void DensePacking::begin(std::size_t buckets) {
  dense_.clear();
  size_ = 0;
  buckets_ = buckets;
  back_to_back_ = true;
}

void DensePacking::add_dense(std::span<float> grad) {
  check_room(grad.size());
  if (!dense_.empty()) {
    const std::span<float> prev = dense_.back().grad;
    back_to_back_ = back_to_back_ && grad.data() == prev.data() + prev.size();
  }
  dense_.push_back({grad, size_});
  size_ += grad.size();
}

std::span<float> DensePacking::add_summed(std::size_t count) {
  check_room(count);
  float* at = buffer() + size_;
  size_ += count;
  back_to_back_ = false;
  return {at, count};
}

std::span<float> DensePacking::pack() {
  if (in_place()) return {dense_.front().grad.data(), size_};
  if (size_ == 0) return {};
  float* const out = buffer();
  for (const DenseSlot& s : dense_) {
    if (!s.grad.empty()) std::memcpy(out + s.offset, s.grad.data(), 4 * s.grad.size());
  }
  return {out, size_};
}

bool DensePacking::in_place() const {
  return back_to_back_ && buckets_ > 0 && dense_.size() == buckets_;
}

void DensePacking::write_means(float inv_w) {
  if (in_place()) {
    sum_to_mean({dense_.front().grad.data(), size_}, inv_w);
    return;
  }
  for (const DenseSlot& s : dense_) {
    float* g = s.grad.data();
    const float* sum = buffer_.data() + s.offset;
    for (std::size_t i = 0; i < s.grad.size(); ++i) g[i] = sum[i] * inv_w;
  }
}

void DensePacking::check_room(std::size_t count) const {
  if (count > capacity_ - size_) {
    throw Error("dense packing: a step adds more than the " + std::to_string(capacity_) +
                " floats it was sized for");
  }
}

float* DensePacking::buffer() {
  if (buffer_.size() < capacity_) buffer_.resize(capacity_);
  return buffer_.data();
}

}  // namespace gradcomp::dist
