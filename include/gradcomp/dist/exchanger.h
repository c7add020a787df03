// The asynchronous exchange of gradient groups, for training loops that hand gradients
// over while the backward pass is still running (PyTorch DDP's communication hooks).
//
// A group is what becomes ready at once -- one DDP bucket -- made of tensors that are
// each one gradcomp bucket (a BucketRef into the caller's memory: no copy). Every group
// key gets a Reducer of its own, built from the compressor spec the first time the key
// is submitted, so every codec, memory and multi-round scheme (PowerSGD, Sketched-SGD,
// FetchSGD, DGC) runs exactly as in `gradcomp train`; nothing is re-implemented here.
//
// Jobs run one at a time, in submission order, on one thread of the Exchanger's own:
// when every rank submits the same groups in the same order (DDP launches buckets in
// index order on every rank), every rank issues the same collectives in the same order,
// which Gloo requires -- also for schemes with several rounds per group, whose rounds
// would otherwise interleave across groups (torch 1.13's own PowerSGD hook breaks
// that way on Gloo with more than one bucket).
//
// After a job fails (CommError from a dead peer, CorruptMessage), the communicator is
// broken and every later job fails at once with the first error: the caller sees the
// failure on its next completion and nothing hangs.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/method.h"
#include "gradcomp/reducer.h"
#include "gradcomp/registry.h"

namespace gradcomp::dist {

class Exchanger {
 public:
  // Called on the exchange thread when a job has finished: nullptr on success.
  using Done = std::function<void(std::exception_ptr error)>;
  // Called on the exchange thread when the job starts, before it reads its spans: e.g.
  // waiting for the device-to-host copy that fills them (the Python hook's CUDA buckets).
  // What it throws fails the job like an error of the exchange.
  using Ready = std::function<void()>;

  // Runs `method` for every group. The communicator must outlive the Exchanger.
  Exchanger(Communicator& comm, Method method);
  // The same for a spec parsed here for the reducer kind (InvalidArgument as Method::parse).
  Exchanger(Communicator& comm, const std::string& compressor_spec,
            ReducerKind kind = ReducerKind::kAuto,
            const CodecRegistry& registry = builtin_registry());
  // Waits for the submitted jobs, then stops the thread. Destroyed by a job's own code on
  // the exchange thread (its completion dropping the last reference), it runs the jobs
  // still queued there, in order, and lets the thread end by itself.
  ~Exchanger();
  Exchanger(const Exchanger&) = delete;
  Exchanger& operator=(const Exchanger&) = delete;

  // Queues the exchange of one group: afterwards every ref's span holds the mean over
  // ranks. `shapes` describes the refs one to one (ids, sizes, compressible, rows); the
  // first submission of `key` builds its reducer from them, later ones must repeat them
  // exactly (InvalidArgument otherwise, at submission). The spans must stay valid until
  // `done` runs. ctx.rank / world / bucket / rows are filled in by the reducer.
  void submit(std::uint64_t key, std::span<const BucketShape> shapes, std::vector<BucketRef> refs,
              const StepContext& ctx, Done done, Ready ready = {});

  // Queues a plain dense average of `data` (one fp32 allreduce, then / W), outside any
  // group's reducer: for steps whose layout is not final yet (DDP's first iteration,
  // before it rebuilds its buckets), and for buckets that go dense anyway.
  // kSharesGiven: every rank already divided its data by W (as DDP does while copying
  // gradients into its buckets), so the sum is the mean and no pass follows it.
  enum class DenseInput { kGradients, kSharesGiven };
  void submit_dense(std::span<float> data, const StepContext& ctx, Done done,
                    DenseInput input = DenseInput::kGradients, Ready ready = {});

  // Queues a job of the caller's own, run on the exchange thread in submission order with
  // the groups' exchanges, so that its collectives keep the ranks' common order (a device
  // reducer's step, gradcomp/device/reducer.h). What it returns is booked as the
  // statistics of ctx.step.
  void submit_task(std::function<ReduceStats()> run, const StepContext& ctx, Done done,
                   Ready ready = {});
  // Blocks until every job submitted so far has finished. InvalidArgument on the exchange
  // thread (from a completion), where it would wait for itself.
  void drain();

  // Statistics of the jobs finished since the last call, summed over groups; steps
  // counts distinct ctx.step values. Call after drain() for a whole step.
  ReduceStats take_stats();

  // The group's memory state (see Reducer::state(): every buffer is named
  // "bucket<id>.<name>", id the tensor's); empty for an unknown key or a stateless
  // compressor. Writable: a checkpoint restores through it. drain() first.
  std::vector<StateBuffer> state(std::uint64_t key);
  // Forgets a group and its reducer (its tensors moved to another group; the caller has
  // taken its state first). drain() first.
  void drop(std::uint64_t key);
  // Whether the group's reducer already exists.
  bool has_group(std::uint64_t key) const;
  // Builds the group's reducer now (so that state() can be restored before the first
  // exchange); a no-op when it exists with these shapes.
  void prepare(std::uint64_t key, std::span<const BucketShape> shapes);

  // What a group with compressed tensors does when a gradient in it holds NaN or an
  // infinity:
  //   kRaise     its codec refuses it (InvalidArgument, the job fails): training without
  //              loss scaling, where a non-finite gradient is a divergence or a bug.
  //   kSkipStep  the ranks first agree whether any of them holds one (one allreduce of
  //              a flag per compressed group and step); if so, every rank's group
  //              becomes +inf and no memory changes, as a dense allreduce would show it
  //              to every rank: a loss scaler (torch's GradScaler) then skips the step
  //              on every rank and lowers its scale. Dense groups (and every group
  //              of a dense method: none) need no agreement: their sum carries a
  //              non-finite value to every rank by itself.
  // Every rank must choose alike. Set it before the first submission or with no job in
  // flight; a submission takes the policy of its time.
  enum class NonFinite { kRaise, kSkipStep };
  void set_non_finite(NonFinite policy) { non_finite_ = policy; }
  NonFinite non_finite() const { return non_finite_; }

  // The method for an optimizer with this momentum (Method::with_momentum: a bare biased
  // codec gets efm(...) when momentum > 0; a memory that keeps the momentum must agree).
  // For callers that learn the optimizer after constructing the exchanger (the Python
  // hook); throws InvalidArgument when a group was already built with another memory.
  // Call it before the first submission or with no job in flight.
  void use_momentum(double momentum, bool nesterov = false);
  // What the groups run (after use_momentum).
  const Method& method() const { return method_; }
  // The compressor spec the groups are built from (after use_momentum).
  const std::string& compressor() const { return method_.spec(); }

  // True when the compressor keeps the optimizer's momentum in its memories (efm, dgc,
  // sketched-sgd, fetchsgd): the optimizer must then skip momentum for compressed tensors.
  bool momentum_in_memory() const { return method_.momentum_in_memory(); }
  // True when every bucket is averaged densely whatever it is (compressor none, or
  // --reducer dense): submit_dense does the same.
  bool dense_only() const { return method_.dense_only(); }
  // The reducer's description, e.g. "allgather(ef(topk:ratio=0.01,...))".
  std::string describe() const;

 private:
  struct Group {
    std::vector<BucketShape> shapes;
    std::unique_ptr<Reducer> reducer;
  };
  struct Job {
    std::function<void()> run;
    Done done;
    Ready ready;
  };

  Group& group_for(std::uint64_t key, std::span<const BucketShape> shapes);
  void enqueue(Job job);
  void loop();
  void run_job(Job& job);
  void book(const ReduceStats& s, std::uint64_t step);

  Communicator& comm_;
  Method method_;
  NonFinite non_finite_ = NonFinite::kRaise;

  mutable std::mutex groups_mutex_;
  std::map<std::uint64_t, Group> groups_;  // node-stable: jobs hold references

  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::condition_variable idle_cv_;
  std::deque<Job> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  bool* loop_exit_ = nullptr;  // the loop's own flag (see loop()); set before any job runs

  std::mutex stats_mutex_;
  ReduceStats stats_;
  bool have_step_ = false;
  std::uint64_t last_step_ = 0;

  std::thread thread_;  // last: starts after everything above exists
};

// Under NonFinite::kSkipStep, on the exchange thread, before a group's reducer: whether
// any rank's group holds NaN or an infinity (`mine`: this rank's), one allreduce of one
// value. True on every rank alike; then every rank fills its group with +inf (the
// caller does, for its kind of buffer) and books one non_finite_skips.
bool any_rank_non_finite(Communicator& comm, bool mine);

}  // namespace gradcomp::dist
