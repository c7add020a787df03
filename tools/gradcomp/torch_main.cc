// gradcomp-torch: the commands of the gradcomp CLI that need LibTorch -- train, eval,
// bench codec with LibTorch's rows (--torch) and bench scheme (reducers run over c10d). Users run
// `gradcomp`, which hands these commands to this binary (main.cc); its messages and --help say
// "gradcomp".
#include <string>
#include <vector>

#include "bench/torch_baseline.h"
#include "blas_core.h"
#include "commands.h"
#include "terminate_handler.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  // Before anything prints or starts a thread: this may replace the process.
  gradcomp::cli::rerun_with_a_known_blas_core(argv);
  // Gloo's and c10d's threads may throw past us: one line and exit 1, not std::terminate.
  gradcomp::cli::install_terminate_handler();
  CLI::App app{"gradcomp: gradient compression for data-parallel training (LibTorch commands)",
               "gradcomp"};
  // With the BLAS: scripts/test.sh reads the OPENBLAS_CORETYPE gradcomp chose from it.
  app.set_version_flag("--version", [] {
    return std::string("gradcomp ") + GRADCOMP_VERSION + "\nBLAS " +
           gradcomp::train::describe_blas();
  });
  app.require_subcommand(1);
  gradcomp::cli::add_train_command(app, argc, argv);
  gradcomp::cli::add_eval_command(app);
  gradcomp::cli::add_bench_command(app, [](int threads) {
    gradcomp::bench::set_torch_threads(threads);
    return std::vector<gradcomp::bench::Baseline>{gradcomp::bench::torch_topk_baseline(0.001)};
  });
  gradcomp::cli::add_bench_scheme_command(*app.get_subcommand("bench"));
  return gradcomp::cli::run_app(app, argc, argv);
}
