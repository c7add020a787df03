// The CLI's commands, one file each. Each adds its subcommand to the app with a
// callback that turns flags into library calls; errors propagate to run_app().
//
// The CLI is two binaries in one directory (see main.cc): `gradcomp`, torch-free (list, advise,
// codec, bench codec), and `gradcomp-torch` (train, eval, bench codec --torch, bench scheme), to
// which `gradcomp` hands those commands with exec.
#pragma once

#include <functional>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/harness.h"

namespace gradcomp::cli {

void add_list_command(CLI::App& app);    // list.cc
void add_codec_command(CLI::App& app);   // codec_cmd.cc
void add_advise_command(CLI::App& app);  // advise_cmd.cc

// LibTorch's rows of `bench codec --torch` for a thread count: gradcomp-torch passes
// them; the torch-free gradcomp passes none (it hands `--torch` to gradcomp-torch).
using TorchBaselines = std::function<std::vector<bench::Baseline>(int threads)>;
void add_bench_command(CLI::App& app, TorchBaselines torch = {});  // bench_cmd.cc
// `bench scheme` under the bench command (bench_scheme_cmd.cc; gradcomp-torch only).
void add_bench_scheme_command(CLI::App& bench);

// train_cmd.cc; argv is kept to start local workers of this same program.
void add_train_command(CLI::App& app, int argc, char** argv);
void add_eval_command(CLI::App& app);  // eval_cmd.cc

// One-line descriptions of the LibTorch commands, shared by both binaries' --help.
inline constexpr const char* kTrainSummary =
    "train a model data-parallel with compressed gradient exchange";
inline constexpr const char* kBenchSchemeSummary =
    "CPU cost per step of a reducer scheme (PowerSGD, Sketched-SGD, FetchSGD) on a model's "
    "buckets, run in a world of one";
inline constexpr const char* kEvalSummary =
    "evaluate the checkpoints of a training run (one JSON line per checkpoint)";

// Thrown by a command whose failure was already reported (e.g. a worker's error):
// run_app() exits with the status, printing nothing more.
struct ExitStatus {
  int code;
};

// "--x: -1 is not a number >= 0" (CLI11's NonNegativeNumber prints the whole range of
// double instead). app.cc.
CLI::Validator non_negative_number();
// "--x: abc is not an integer >= 1" (CLI11's PositiveNumber prints its whole double
// range instead). app.cc.
CLI::Validator integer_at_least(long long min);
// "--threads: 100000 is not an integer in [1, 1024]". app.cc.
CLI::Validator integer_in(long long min, long long max);
// "--overlap: nan is not a number in [0, 1]" (CLI::Range lets NaN through). app.cc.
CLI::Validator number_in(double min, double max);
// For unsigned flags: "--seed: -1 is not an integer >= 0". CLI11 2.1 reads "-1" into a
// 64-bit unsigned as 2^64 - 1 without complaint (strtoull's wrap-around). app.cc.
CLI::Validator unsigned_integer();
// For paths: "--metrics: the path is empty". An empty value would otherwise switch the
// feature off (or choose the default) as if the flag were absent. app.cc.
CLI::Validator non_empty_path();

// Parses argv into `app` (running the chosen command's callback) and turns every error
// into one line "gradcomp: <message>" on stderr and exit status 1 (app.cc).
int run_app(CLI::App& app, int argc, char** argv);

}  // namespace gradcomp::cli
