// gradcomp-torch, the binary beside gradcomp that runs the commands needing LibTorch
// (main.cc hands them over by exec; advise runs `bench scheme` in it as a child).
#pragma once

#include <string>
#include <vector>

namespace gradcomp::cli {

// <directory of this executable>/gradcomp-torch.
std::string torch_binary_path();

// Runs gradcomp-torch with `args` (no shell) and returns what it wrote to stdout; its
// stderr goes to ours. Error naming the command when it cannot start or exits non-zero.
std::string run_torch_binary(const std::vector<std::string>& args);

}  // namespace gradcomp::cli
