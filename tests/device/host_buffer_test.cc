// HostBuffer (src/device/host_buffer.h): what the device reducers copy through, reused
// across steps and grown by half again; plain memory for a CPU device.
#include <gtest/gtest.h>

#include "device/host_buffer.h"

namespace gradcomp::device {
namespace {

TEST(HostBuffer, IsReusedKeepsItsContentsAndGrowsByHalf) {
  HostBuffer b(at::kFloat, at::Device(at::kCPU));
  EXPECT_FALSE(b.pinned());
  EXPECT_EQ(b.take(0).numel(), 0);
  at::Tensor t = b.take(100);
  EXPECT_EQ(t.numel(), 100);
  EXPECT_EQ(t.scalar_type(), at::kFloat);
  EXPECT_TRUE(t.is_cpu());
  t.fill_(3.0f);
  const std::size_t first = b.allocations();
  EXPECT_TRUE(b.take(60).eq(3.0f).all().item<bool>());  // smaller: the same memory
  EXPECT_EQ(b.take(100).data_ptr(), t.data_ptr());
  EXPECT_EQ(b.allocations(), first);
  b.take(120);  // larger: reallocated, to 150
  EXPECT_EQ(b.allocations(), first + 1);
  b.take(150);
  EXPECT_EQ(b.allocations(), first + 1);
  b.take(1000);  // past half again: exactly what is asked
  b.take(1000);
  EXPECT_EQ(b.allocations(), first + 2);
  HostBuffer bytes(at::kByte, at::Device(at::kCPU));
  EXPECT_EQ(bytes.take(7).scalar_type(), at::kByte);
}

}  // namespace
}  // namespace gradcomp::device
