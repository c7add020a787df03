// The list of built-in codecs. Each codec file defines its register_* function; adding
// a codec means one line here (explicit registration: no static initialisers that a
// static link could drop). Wire ids are part of the wire format: never reuse one.
#include "codecs/codecs.h"
#include "gradcomp/registry.h"
#include "memory/dgc.h"

namespace gradcomp {

void register_builtin_codecs(CodecRegistry& registry) {
  // dense
  register_none(registry);  // wire id 1
  register_fp16(registry);  // wire id 2
  // sparsifiers
  register_topk(registry);       // wire id 3
  register_randomk(registry);    // wire id 4
  register_threshold(registry);  // wire ids 5 (threshold), 6 (mask)
  register_chunktopk(registry);  // wire id 15 (ids are appended, never renumbered)
  // quantizers
  register_threshold_2bit(registry);  // wire id 7
  register_onebit(registry);          // wire id 8
  register_qsgd(registry);            // wire id 9
  register_terngrad(registry);        // wire id 10
  register_signsgd(registry);         // wire ids 11 (signsgd), 12 (efsign)
  register_int(registry);             // wire id 16
  // named memories (their messages are those of a codec above)
  register_dgc(registry);  // dgc: topk messages
  // sketches
  register_sketch(registry);  // wire id 13
  // atomic sparsification
  register_atomo(registry);  // wire id 14
  // reducer schemes (descriptions only: no wire id of their own)
  register_builtin_schemes(registry);
}

}  // namespace gradcomp
