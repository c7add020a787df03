// The list of built-in codecs. Each codec file defines its register_* function; adding
// a codec means one line here (explicit registration: no static initialisers that a
// static link could drop). Wire ids are part of the wire format: never reuse one.
#include "codecs/codecs.h"
#include "gradcomp/registry.h"

namespace gradcomp {

void register_builtin_codecs(CodecRegistry& registry) {
  // dense
  register_none(registry);  // wire id 1
  // REGISTER-LIST (one line per codec; keep wire ids unique, see codecs/codecs.h)
  register_randomk(registry);  // wire id 4
  register_qsgd(registry);     // wire id 9
}

}  // namespace gradcomp
