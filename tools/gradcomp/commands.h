// The CLI's commands, one file each. Each adds its subcommand to the app with a
// callback that turns flags into library calls; errors propagate to main().
#pragma once

#include <CLI/CLI.hpp>

namespace gradcomp::cli {

void add_list_command(CLI::App& app);   // list.cc
void add_codec_command(CLI::App& app);  // codec_cmd.cc
void add_bench_command(CLI::App& app);  // bench_cmd.cc
// train_cmd.cc; argv is kept to start local workers of this same program.
void add_train_command(CLI::App& app, int argc, char** argv);
void add_eval_command(CLI::App& app);  // eval_cmd.cc

// Thrown by a command whose failure was already reported (e.g. a worker's error):
// main() exits with the status, printing nothing more.
struct ExitStatus {
  int code;
};

}  // namespace gradcomp::cli
