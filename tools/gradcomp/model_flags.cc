#include "model_flags.h"

#include <fstream>
#include <sstream>

#include "gradcomp/error.h"

namespace gradcomp::cli {

std::string read_text_file(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument(std::string(what) + ": cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

advise::ModelSizes model_from_flags(const std::string& model, const std::string& sizes) {
  if (sizes.empty()) return advise::builtin_model(model);
  // Shapes written out contain only digits, 'x' and separators; anything else is a path.
  const bool literal = sizes.find_first_not_of("0123456789x, ") == std::string::npos;
  return literal ? advise::parse_sizes(sizes)
                 : advise::parse_sizes(read_text_file(sizes, "--sizes"), sizes);
}

}  // namespace gradcomp::cli
