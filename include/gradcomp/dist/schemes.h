// Reducer schemes: methods that are a whole exchange protocol rather than a codec under
// a generic reducer -- PowerSGD (two allreduces of low-rank factors), Sketched-SGD
// (sketch round, then exact values at the candidates), FetchSGD (momentum and error in
// sketch space). The user names them in --compressor exactly like codecs
// ("powersgd:rank=2"); a Method (gradcomp/method.h) knows a scheme from the registry's
// description, and make_reducer() builds its reducer from the factory here. Parameters use
// the codec registry's ParamDef machinery, so a scheme's spec is validated, defaulted and
// listed (`gradcomp list`) like a codec's.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/reducer.h"
#include "gradcomp/registry.h"

namespace gradcomp::dist {

// What a scheme is (name, parameters, traits) is the core's (gradcomp/registry.h,
// SchemeDescription: a Method is parsed without the code that runs it); this layer adds
// the code.
using gradcomp::canonical_scheme_spec;
using gradcomp::SchemeDescription;

// A scheme: its description and the factory of its reducer.
struct SchemeInfo : SchemeDescription {
  // Builds the reducer for these buckets; `spec` is the canonical spec
  // ("powersgd:rank=2,...") for describe(). The communicator outlives the reducer.
  std::function<std::unique_ptr<Reducer>(const Params& params, const std::string& spec,
                                         Communicator& comm, std::span<const BucketShape> buckets)>
      make;
};

// Every built-in scheme, sorted by name (the same names as the registry's schemes()).
const std::vector<SchemeInfo>& reducer_schemes();
// nullptr when `name` is not a scheme.
const SchemeInfo* find_scheme(std::string_view name);

}  // namespace gradcomp::dist
