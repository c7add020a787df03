// time_reducer: a reducer's own encode and decode time in a world of one (what
// `gradcomp bench scheme` prints and `gradcomp advise` costs the schemes with).
#include <gtest/gtest.h>

#include <vector>

#include "gradcomp/dist/reducer_timing.h"
#include "gradcomp/error.h"

namespace gradcomp::dist {
namespace {

// A 200 x 250 matrix that every scheme compresses, an odd-sized one, and the dense bucket.
std::vector<BucketShape> shapes() {
  return {{.id = 0, .numel = 200 * 250, .compressible = true, .rows = 200},
          {.id = 1, .numel = 37 * 41, .compressible = true, .rows = 37},
          {.id = 2, .numel = 333, .compressible = false, .rows = 0}};
}

TEST(ReducerTiming, SchemesReportTheirOwnWork) {
  for (const char* spec : {"sketched-sgd", "fetchsgd", "powersgd:rank=2"}) {
    const ReducerTiming t = time_reducer(spec, shapes(), 1, 3);
    EXPECT_EQ(t.compressed_elements, 200u * 250 + 37 * 41) << spec;
    EXPECT_EQ(t.steps, 3) << spec;
    EXPECT_GT(t.encode_s, 0.0) << spec;
    EXPECT_GT(t.decode_s, 0.0) << spec;
  }
}

TEST(ReducerTiming, CodecSpecsAndEmptyModels) {
  const ReducerTiming t = time_reducer("ef(topk:ratio=0.01)", shapes(), 0, 1);
  EXPECT_GT(t.encode_s, 0.0);
  const ReducerTiming none = time_reducer("sketched-sgd", {}, 0, 1);
  EXPECT_EQ(none.compressed_elements, 0u);
}

TEST(ReducerTiming, BadInputsRefused) {
  EXPECT_THROW(time_reducer("sketched-sgd", shapes(), 1, 0), InvalidArgument);
  EXPECT_THROW(time_reducer("sketched-sgd", shapes(), -1, 1), InvalidArgument);
  EXPECT_THROW(time_reducer("nosuch", shapes(), 0, 1), InvalidArgument);
  EXPECT_THROW(time_reducer("powersgd:rank=0", shapes(), 0, 1), InvalidArgument);
}

}  // namespace
}  // namespace gradcomp::dist
