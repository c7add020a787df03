// --model / --sizes, as `advise` and `bench scheme` take them (one binary each, so the
// resolution lives here once).
#pragma once

#include <string>

#include "gradcomp/advise/models.h"

namespace gradcomp::cli {

// The whole file; InvalidArgument "<what>: cannot read <path>".
std::string read_text_file(const std::string& path, const char* what);

// --sizes when given (shapes written out, or a file of them), else the built-in --model.
advise::ModelSizes model_from_flags(const std::string& model, const std::string& sizes);

}  // namespace gradcomp::cli
