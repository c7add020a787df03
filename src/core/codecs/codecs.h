// Registration functions of the built-in codecs, one per algorithm file.
//
// Wire ids (part of the wire format; never reuse one):
//   1 none      2 fp16      3 topk      4 randomk   5 threshold  6 mask
//   7 2bit      8 1bit      9 qsgd     10 terngrad 11 signsgd   12 efsign
//  13 sketch   14 atomo    15 chunktopk 16 int
#pragma once

#include "gradcomp/registry.h"

namespace gradcomp {

void register_none(CodecRegistry& registry);
void register_fp16(CodecRegistry& registry);
void register_topk(CodecRegistry& registry);
void register_randomk(CodecRegistry& registry);
void register_threshold(CodecRegistry& registry);  // threshold and mask
void register_threshold_2bit(CodecRegistry& registry);
void register_onebit(CodecRegistry& registry);
void register_qsgd(CodecRegistry& registry);
void register_terngrad(CodecRegistry& registry);
void register_signsgd(CodecRegistry& registry);    // signsgd and efsign
void register_sketch(CodecRegistry& registry);     // count sketch (Sketched-SGD, FetchSGD)
void register_atomo(CodecRegistry& registry);      // ATOMO spectral and entrywise atoms
void register_chunktopk(CodecRegistry& registry);  // per-chunk top-k (DeMo, SparseLoCo)
void register_int(CodecRegistry& registry);        // b-bit absmax blocks (Streaming DiLoCo)
// The reducer schemes' descriptions (scheme_descriptions.cc; their reducers live in
// src/dist).
void register_builtin_schemes(CodecRegistry& registry);

}  // namespace gradcomp
