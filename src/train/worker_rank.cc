#include "train/worker_rank.h"

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gradcomp/dist/config_check.h"
#include "gradcomp/registry.h"
#include "train/datasets.h"
#include "train/job_config.h"
#include "train/rank_setup.h"
#include "train/resume_agreement.h"
#include "train/role.h"

namespace gradcomp::train {

WorkerRank::WorkerRank(const JobOptions& options, const Method& method,
                       dist::RendezvousConfig rendezvous, Report& report)
    : options_(options),
      method_(method),
      rendezvous_(std::move(rendezvous)),
      report_(rendezvous_.rank == 0 ? report : silent_) {
  if (is_parameter_server(options_)) ps_ = ps_config(options_, rendezvous_.world_size);
  workers_ = ps_ ? ps_->workers : rendezvous_.world_size;
}

TrainConfig WorkerRank::trainer_config() {
  TrainConfig cfg = options_.train;
  cfg.rank = rendezvous_.rank;
  cfg.world = workers_;
  if (!options_.threads_given) {
    // Servers mostly wait: the cores go to the workers.
    cfg.threads =
        default_threads(started_by_local_launcher() ? workers_ : local_workers_from_env());
  }
  cfg.report = &report_;
  return cfg;
}

int WorkerRank::run() {
  const JobOptions& o = options_;
  const int rank = rendezvous_.rank;
  TrainConfig cfg = trainer_config();
  data::Dataset all_train = load_dataset(o.data, data::Split::kTrain, cfg.seed);
  data::Dataset test_set = load_dataset(o.data, data::Split::kTest, cfg.seed);
  if (rank == 0) {
    report_.set_metrics_file(o.metrics_path);  // one metrics file, written by rank 0
    report_.set_labels(
        {.topology = o.topology,
         .servers = o.servers,
         .model = o.train.model.name,
         .dataset = o.data.dataset,
         .compressor = o.compressor,
         // What a language model must beat, from the whole train split (not a shard).
         .unigram_nats = all_train.text ? data::unigram_cross_entropy(all_train, test_set) : 0.0});
  }
  data::Dataset train_set = data::shard(all_train, rank, workers_);
  cfg.smallest_shard = all_train.n / workers_;  // every rank takes the same steps
  all_train = {};

  // The fields of the start-up check need the model's shapes and buckets before the
  // trainer builds its own (from the same options, so the same ones).
  ConfigFields fields;
  {
    const std::shared_ptr<Model> model = make_model(job_model_config(o, train_set));
    std::vector<BucketPlan> plan = plan_buckets(describe_parameters(*model), cfg.layout);
    fields = job_config_fields(o, method_, rendezvous_.world_size, *model, plan);
  }
  // The compressor's schedule in this run as the trainer will count it (steps_per_epoch =
  // shard / batch, epochs of it), once; what its settings cannot do in this run comes
  // from the gradient sync, printed by the trainer.
  RunShape shape;
  shape.steps_per_epoch =
      cfg.batch_size > 0 ? static_cast<std::uint64_t>(cfg.smallest_shard / cfg.batch_size) : 0;
  shape.total_steps =
      static_cast<std::uint64_t>(std::max<std::int64_t>(cfg.epochs, 0)) * shape.steps_per_epoch;
  if (const std::string schedule = method_.schedule(shape); !schedule.empty()) {
    report_.line(schedule);
  }
  dist::Communicator comm = connect_rank(rendezvous_);
  // Before any other collective (the resume agreement included): ranks started with
  // different configurations would exchange tensors of different sizes in it.
  dist::check_ranks_agree(comm, fields);
  if (cfg.resume && !cfg.checkpoint_dir.empty()) {
    cfg.resume_file = agree_resume_file(comm, o, workers_);
  }
  // Allreduce: gradcomp's public GradientExchange, overlapped with backward. A
  // parameter-server worker pushes and pulls whole steps after backward.
  dist::PsWorker* ps_worker = nullptr;
  const SyncFactory factory =
      ps_ ? reducer_sync(
                [&](std::span<const BucketShape> shapes) -> std::unique_ptr<Reducer> {
                  auto w = dist::make_ps_worker(*ps_, comm, shapes, builtin_registry());
                  ps_worker = w.get();
                  return w;
                },
                method_)
      : has_outer_loop(o) ? outer_sync(comm, o.compressor, o.reducer, o.outer_loop)
                          : exchange_sync(comm, o.compressor, o.reducer);
  Trainer trainer(cfg, std::move(train_set), std::move(test_set), factory);
  (void)trainer.run();
  if (ps_worker != nullptr) {
    ps_worker->finish();
    report_.parameter_server({.topology = ps_->topology,
                              .servers = ps_->servers,
                              .workers = ps_->workers,
                              .downlink = ps_->downlink,
                              .max_staleness = ps_->max_staleness,
                              .async_momentum = ps_->async_momentum,
                              .server_optimizer = dist::async_server_optimizer(*ps_),
                              .staleness = ps_worker->staleness()});
  }
  return 0;
}

}  // namespace gradcomp::train
