// Reducer schemes: methods that are a whole exchange protocol rather than a codec under
// a generic reducer -- PowerSGD (two allreduces of low-rank factors), Sketched-SGD
// (sketch round, then exact values at the candidates), FetchSGD (momentum and error in
// sketch space). The user names them in --compressor exactly like codecs
// ("powersgd:rank=2"); make_reducer() looks a name up here first, then in the codec
// registry. Parameters use the codec registry's ParamDef machinery, so a scheme's spec
// is validated, defaulted and listed (`gradcomp list`) like a codec's.
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

// What a scheme is, without the code that runs it: the name users type, the parameters
// with defaults and ranges, examples. Torch-free (library gradcomp_scheme_descriptions,
// scheme_descriptions.cc), so `gradcomp list` describes the schemes without linking c10d.
struct SchemeDescription {
  std::string name;     // what users type: "powersgd"
  std::string summary;  // one line for `gradcomp list`
  std::vector<ParamDef> params;
  std::vector<std::string> examples;
};

// A scheme: its description and the factory of its reducer.
struct SchemeInfo : SchemeDescription {
  // Builds the reducer for these buckets; `spec` is the canonical spec
  // ("powersgd:rank=2,...") for describe(). The communicator outlives the reducer.
  std::function<std::unique_ptr<Reducer>(const Params& params, const std::string& spec,
                                         Communicator& comm, std::span<const BucketShape> buckets)>
      make;
};

// Every built-in scheme's description, sorted by name (torch-free).
const std::vector<SchemeDescription>& scheme_descriptions();

// Every built-in scheme, sorted by name (the same names as scheme_descriptions()).
const std::vector<SchemeInfo>& reducer_schemes();
// nullptr when `name` is not a scheme.
const SchemeInfo* find_scheme(std::string_view name);

// The canonical spec of a scheme spec ("powersgd" -> "powersgd:rank=2,..."), validating
// it; InvalidArgument for unknown keys or bad values. Torch-free.
std::string canonical_scheme_spec(const SchemeDescription& info, const SpecNode& node);

// Checks a --compressor value without building anything: a scheme spec or a codec /
// memory spec. Throws InvalidArgument with the registry's message.
void validate_compressor_spec(std::string_view spec,
                              const CodecRegistry& registry = builtin_registry());

}  // namespace gradcomp::dist
