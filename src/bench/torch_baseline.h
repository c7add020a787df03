// LibTorch baselines for `gradcomp bench codec`. This header is LibTorch-free; its
// .cc is the only translation unit in gradcomp that includes LibTorch (target
// gradcomp_torch_baseline), so the rest of the tree builds without parsing it.
#pragma once

#include "bench/harness.h"

namespace gradcomp::bench {

// at::set_num_threads (LibTorch's intra-op pool).
void set_torch_threads(int threads);

// at::topk(at::abs(g), k) with k = ceil(ratio * n): what a LibTorch user writes for a
// top-k sparsifier, timed on the harness's input with the harness's repeats and
// thread count. It is compared against gradcomp's top-k with sampled and exact
// selection at the same ratio.
Baseline torch_topk_baseline(double ratio = 0.001);

}  // namespace gradcomp::bench
