// The CLI's commands, one file each. Each adds its subcommand to the app with a
// callback that turns flags into library calls; errors propagate to main().
#pragma once

#include <CLI/CLI.hpp>

namespace gradcomp::cli {

void add_list_command(CLI::App& app);   // list.cc
void add_codec_command(CLI::App& app);  // codec_cmd.cc
void add_bench_command(CLI::App& app);  // bench_cmd.cc

}  // namespace gradcomp::cli
