// gradcomp: the command-line front end, without LibTorch. It runs list, codec, advise and
// bench codec itself and starts in milliseconds; the commands that need LibTorch
// (train, eval, bench codec --torch, bench scheme) it hands to gradcomp-torch, the binary beside
// it, by exec: same argv, same process, so exit status and signals are that program's own.
#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "commands.h"
#include "terminate_handler.h"
#include "torch_binary.h"

namespace {

// True when argv names a command that only gradcomp-torch has.
bool needs_torch(int argc, char** argv) {
  if (argc < 2) return false;
  const std::string_view command = argv[1];
  if (command == "train" || command == "eval") return true;
  if (command == "bench") {
    if (argc > 2 && std::string_view(argv[2]) == "scheme") return true;
    for (int i = 2; i < argc; ++i) {
      if (std::string_view(argv[i]) == "--torch") return true;
    }
  }
  return false;
}

// Replaces this process with gradcomp-torch; returns only on failure (status 1).
int exec_torch(int argc, char** argv) {
  const std::string torch = gradcomp::cli::torch_binary_path();
  std::vector<char*> args(argv, argv + argc);
  args[0] = const_cast<char*>(torch.c_str());
  args.push_back(nullptr);
  execv(torch.c_str(), args.data());
  const std::string line = std::string("gradcomp: ") + argv[1] + " needs " + torch + ": " +
                           std::strerror(errno) +
                           " (build it with: cmake --build build --target gradcomp)\n";
  std::cerr.write(line.data(), static_cast<std::streamsize>(line.size()));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (needs_torch(argc, argv)) return exec_torch(argc, argv);
  gradcomp::cli::install_terminate_handler();

  CLI::App app{"gradcomp: gradient compression for data-parallel training", "gradcomp"};
  app.set_version_flag("--version", std::string("gradcomp ") + GRADCOMP_VERSION);
  app.require_subcommand(1);
  gradcomp::cli::add_list_command(app);
  gradcomp::cli::add_codec_command(app);
  gradcomp::cli::add_bench_command(app);
  gradcomp::cli::add_advise_command(app);
  // Listed in --help; never parsed here (needs_torch() sent it on above).
  app.get_subcommand("bench")
      ->add_subcommand("scheme", gradcomp::cli::kBenchSchemeSummary)
      ->allow_extras();
  // Listed in --help; never parsed here (needs_torch() sent them on above).
  app.add_subcommand("train", gradcomp::cli::kTrainSummary)->allow_extras();
  app.add_subcommand("eval", gradcomp::cli::kEvalSummary)->allow_extras();
  return gradcomp::cli::run_app(app, argc, argv);
}
