#include "train/server_rank.h"

#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "gradcomp/dist/config_check.h"
#include "gradcomp/registry.h"
#include "train/datasets.h"
#include "train/job_config.h"
#include "train/rank_setup.h"
#include "train/resume_agreement.h"
#include "train/server_checkpoints.h"

namespace gradcomp::train {

ServerRank::ServerRank(const JobOptions& options, const Method& method,
                       dist::RendezvousConfig rendezvous)
    : options_(options), method_(method), rendezvous_(std::move(rendezvous)) {}

int ServerRank::run() {
  const JobOptions& o = options_;
  const dist::RendezvousConfig& rc = rendezvous_;
  const dist::PsConfig pc = ps_config(o, rc.world_size);
  set_threads(1);
  const data::Dataset shape_of = load_dataset(o.data, data::Split::kTest, o.train.seed);
  const std::shared_ptr<Model> model = make_model(job_model_config(o, shape_of));
  std::vector<BucketPlan> plan = plan_buckets(describe_parameters(*model), o.train.layout);
  const std::vector<BucketShape> shapes = bucket_shapes(plan);
  GradientBuffers buffers(model->parameters(), std::move(plan));
  std::vector<std::span<const float>> initial;
  if (pc.topology == Topology::kPsAsync) {
    buffers.gather_weights();
    for (std::span<float> w : buffers.weights()) initial.emplace_back(w);
  }
  dist::PsServerCheckpoints checkpoints;
  if (!o.train.checkpoint_dir.empty()) {
    CheckpointMeta identity;
    identity.seed = o.train.seed;
    identity.rank = static_cast<std::uint32_t>(rc.rank);
    identity.world = static_cast<std::uint32_t>(rc.world_size);
    checkpoints =
        server_checkpoints(o.train.checkpoint_dir, rc.rank - pc.workers, identity, o.train.resume);
  }
  dist::Communicator comm = connect_rank(rc);
  dist::check_ranks_agree(comm,
                          job_config_fields(o, method_, rc.world_size, *model, buffers.plan()));
  if (o.train.resume && !o.train.checkpoint_dir.empty())
    (void)agree_resume_file(comm, o, pc.workers);
  (void)dist::run_ps_server(pc, comm, shapes, initial, builtin_registry(), checkpoints);
  return 0;
}

}  // namespace gradcomp::train
