// gradcomp eval: flags to a train::EvalOptions, then train::run_eval.
#include <iostream>
#include <memory>
#include <string>

#include "commands.h"
#include "gradcomp/cpu.h"
#include "train/evaluator.h"

namespace gradcomp::cli {

void add_eval_command(CLI::App& app) {
  struct Flags {
    train::EvalOptions eval;
    std::string model = "mlp";
    std::string mlp_hidden = "1536,1536";
  };
  auto flags = std::make_shared<Flags>();
  train::EvalOptions& e = flags->eval;
  CLI::App* cmd = app.add_subcommand("eval", kEvalSummary);
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("--checkpoint-dir", e.checkpoint_dir, "the run's --checkpoint-dir")
      ->required()
      ->check(non_empty_path());
  cmd->add_flag("--follow", e.follow, "keep waiting for new checkpoints");
  cmd->add_option("--idle-seconds", e.idle_seconds,
                  "--follow: stop after this long without a new checkpoint (0: never)")
      ->capture_default_str()
      ->check(non_negative_number());
  cmd->add_option("--poll-ms", e.poll_ms, "--follow: directory polling interval")
      ->capture_default_str()
      ->check(integer_at_least(1));
  cmd->add_option("--output", e.output, "append the JSON lines to this file (default: stdout)")
      ->check(non_empty_path());
  cmd->add_option("--model", flags->model,
                  "the trained model: mlp | lenet5 | resnet20 | transformer")
      ->capture_default_str();
  cmd->add_option("--mlp-hidden", flags->mlp_hidden, "MLP hidden widths")->capture_default_str();
  cmd->add_option("--dataset", e.data.dataset,
                  "fashion-mnist | mnist | cifar10 | synthetic | fortunes")
      ->capture_default_str();
  cmd->add_option("--context", e.data.context, "text: the run's --context")
      ->capture_default_str()
      ->check(integer_at_least(1));
  cmd->add_option("--data-dir", e.data.data_dir, "data directory (default: the dataset's own)")
      ->check(non_empty_path());
  cmd->add_option("--synthetic-train", e.data.synthetic_train,
                  "synthetic: train samples (as the run had them)");
  cmd->add_option("--seed", e.seed, "the run's seed (synthetic data)")
      ->capture_default_str()
      ->check(unsigned_integer());
  cmd->add_option("--eval-batch", e.eval_batch, "samples per forward pass")
      ->capture_default_str()
      ->check(integer_at_least(1));
  cmd->add_option("--threads", e.threads, "intra-op threads")
      ->capture_default_str()
      ->check(integer_in(1, kMaxThreads));
  cmd->callback([flags] {
    train::EvalOptions o = flags->eval;
    o.model.name = flags->model;
    o.model.mlp_hidden = train::parse_widths(flags->mlp_hidden, "--mlp-hidden");
    train::run_eval(o, std::cout);
  });
}

}  // namespace gradcomp::cli
