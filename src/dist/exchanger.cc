// The Exchanger (gradcomp/dist/exchanger.h): a FIFO of exchange jobs drained by one
// thread, and one Reducer per group key.
#include "gradcomp/dist/exchanger.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "dense_packing.h"
#include "gradcomp/error.h"
#include "gradcomp/finite.h"
#include "step_recorder.h"

namespace gradcomp::dist {

namespace {

bool same_shapes(std::span<const BucketShape> a, std::span<const BucketShape> b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].id != b[i].id || a[i].numel != b[i].numel || a[i].compressible != b[i].compressible ||
        a[i].rows != b[i].rows) {
      return false;
    }
  }
  return true;
}

std::string describe_shapes(std::span<const BucketShape> shapes) {
  std::string out = "[";
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shapes[i].numel);
    if (!shapes[i].compressible) out += " dense";
  }
  return out + "]";
}

bool any_compressed(std::span<const BucketRef> refs) {
  return std::any_of(refs.begin(), refs.end(), [](const BucketRef& r) { return r.compressed; });
}

bool holds_non_finite(std::span<const BucketRef> refs) {
  return std::any_of(refs.begin(), refs.end(),
                     [](const BucketRef& r) { return find_non_finite(r.grad) != r.grad.size(); });
}

}  // namespace

bool any_rank_non_finite(Communicator& comm, bool mine) {
  float flag = mine ? 1.0f : 0.0f;
  comm.allreduce_sum(std::span<float>(&flag, 1));
  return flag != 0.0f;
}

Exchanger::Exchanger(Communicator& comm, Method method) : comm_(comm), method_(std::move(method)) {
  thread_ = std::thread([this] { loop(); });
}

Exchanger::Exchanger(Communicator& comm, const std::string& compressor_spec, ReducerKind kind,
                     const CodecRegistry& registry)
    : Exchanger(comm, Method::parse(compressor_spec, {.reducer = kind}, registry)) {}

void Exchanger::use_momentum(double momentum, bool nesterov) {
  Method resolved = method_.with_momentum(momentum, nesterov);
  if (resolved.spec() == method_.spec()) {
    method_ = std::move(resolved);
    return;
  }
  std::lock_guard lock(groups_mutex_);
  if (!groups_.empty()) {
    throw InvalidArgument("exchanger: " + method_.spec() + " was already built without momentum; " +
                          "give the exchanger the optimizer (momentum " + std::to_string(momentum) +
                          ") before the first compressed step");
  }
  method_ = std::move(resolved);
}

std::string Exchanger::describe() const { return describe_reducer(method_); }

Exchanger::~Exchanger() {
  std::unique_lock lock(queue_mutex_);
  stopping_ = true;
  if (std::this_thread::get_id() != thread_.get_id()) {
    lock.unlock();
    queue_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    return;
  }
  // Destroyed by a job's caller code on the exchange thread itself (a Python completion
  // holding the last reference to its exchanger): the thread cannot join itself. The jobs
  // still queued run here, in order, as the loop would have run them; then the thread is
  // told to return without touching this object again, and is detached.
  while (!queue_.empty()) {
    Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    run_job(job);
    lock.lock();
  }
  *loop_exit_ = true;
  thread_.detach();
}

Exchanger::Group& Exchanger::group_for(std::uint64_t key, std::span<const BucketShape> shapes) {
  std::lock_guard lock(groups_mutex_);
  auto it = groups_.find(key);
  if (it == groups_.end()) {
    Group g;
    g.shapes.assign(shapes.begin(), shapes.end());
    g.reducer = make_reducer(method_, comm_, shapes);
    it = groups_.emplace(key, std::move(g)).first;
  } else if (!same_shapes(it->second.shapes, shapes)) {
    throw InvalidArgument("exchanger: group " + std::to_string(key) + " was built for tensors " +
                          describe_shapes(it->second.shapes) + ", now submitted with " +
                          describe_shapes(shapes));
  }
  return it->second;
}

void Exchanger::prepare(std::uint64_t key, std::span<const BucketShape> shapes) {
  (void)group_for(key, shapes);
}

void Exchanger::drop(std::uint64_t key) {
  std::lock_guard lock(groups_mutex_);
  groups_.erase(key);
}

bool Exchanger::has_group(std::uint64_t key) const {
  std::lock_guard lock(groups_mutex_);
  return groups_.count(key) != 0;
}

void Exchanger::submit(std::uint64_t key, std::span<const BucketShape> shapes,
                       std::vector<BucketRef> refs, const StepContext& ctx, Done done,
                       Ready ready) {
  if (refs.size() != shapes.size()) {
    throw InvalidArgument("exchanger: " + std::to_string(refs.size()) + " tensors for " +
                          std::to_string(shapes.size()) + " shapes");
  }
  for (std::size_t i = 0; i < refs.size(); ++i) {
    if (refs[i].id != shapes[i].id || refs[i].grad.size() != shapes[i].numel) {
      throw InvalidArgument("exchanger: tensor " + std::to_string(i) + " of group " +
                            std::to_string(key) + " does not match its shape");
    }
  }
  Group& group = group_for(key, shapes);
  Reducer* reducer = group.reducer.get();
  // A dense method ("none", --reducer dense) sums every bucket: the sum carries a
  // non-finite value to every rank by itself.
  const bool agree_finite =
      non_finite_ == NonFinite::kSkipStep && !method_.dense_only() && any_compressed(refs);
  enqueue({[this, reducer, refs = std::move(refs), ctx, agree_finite] {
             if (agree_finite && any_rank_non_finite(comm_, holds_non_finite(refs))) {
               for (const BucketRef& r : refs) {
                 std::fill(r.grad.begin(), r.grad.end(), std::numeric_limits<float>::infinity());
               }
               ReduceStats skipped;
               skipped.non_finite_skips = 1;
               book(skipped, ctx.step);
               return;
             }
             reducer->reduce(refs, ctx);
             book(reducer->take_stats(), ctx.step);
           },
           std::move(done), std::move(ready)});
}

void Exchanger::submit_dense(std::span<float> data, const StepContext& ctx, Done done,
                             DenseInput input, Ready ready) {
  enqueue({[this, data, ctx, input] {
             ReduceStats s;
             StepRecorder rec(comm_, s);
             rec.encoded();
             comm_.allreduce_sum(data);
             rec.communicated();
             if (input == DenseInput::kGradients) {
               sum_to_mean(data, 1.0f / static_cast<float>(comm_.world_size()));
             }
             rec.decoded();
             rec.finish();
             book(s, ctx.step);
           },
           std::move(done), std::move(ready)});
}

void Exchanger::submit_task(std::function<ReduceStats()> run, const StepContext& ctx, Done done,
                            Ready ready) {
  enqueue({[this, run = std::move(run), step = ctx.step] { book(run(), step); }, std::move(done),
           std::move(ready)});
}

void Exchanger::enqueue(Job job) {
  {
    std::lock_guard lock(queue_mutex_);
    queue_.push_back(std::move(job));
  }
  queue_cv_.notify_one();
}

void Exchanger::run_job(Job& job) {
  std::exception_ptr error;
  try {
    if (job.ready) job.ready();
    job.run();
  } catch (...) {
    error = std::current_exception();
  }
  // The completion is the caller's code: whatever it throws must not end the thread
  // (an exception escaping a thread is std::terminate).
  try {
    if (job.done) job.done(error);
  } catch (...) {
  }
  // Destroy the job, and the caller's completion with it, before the caller takes the
  // lock again: a Python completion takes the GIL when it dies, and the thread holding
  // the GIL may be waiting for this lock in submit() (a deadlock seen in the network lab).
  job = Job{};
}

void Exchanger::loop() {
  // Set by the destructor when the caller's code in a job destroyed the Exchanger on this
  // thread: from then on `this` is gone, and nothing here may touch it.
  bool exit_now = false;
  std::unique_lock lock(queue_mutex_);
  loop_exit_ = &exit_now;
  for (;;) {
    queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything submitted has run
    Job job = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    run_job(job);
    if (exit_now) return;
    lock.lock();
    busy_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

void Exchanger::drain() {
  if (std::this_thread::get_id() == thread_.get_id()) {
    throw InvalidArgument(
        "exchanger: drain() called by a job on the exchange thread would wait "
        "for that job itself");
  }
  std::unique_lock lock(queue_mutex_);
  idle_cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
}

void Exchanger::book(const ReduceStats& s, std::uint64_t step) {
  std::lock_guard lock(stats_mutex_);
  stats_.add_costs(s);
  if (!have_step_ || step != last_step_) {
    ++stats_.steps;
    have_step_ = true;
    last_step_ = step;
  }
}

ReduceStats Exchanger::take_stats() {
  std::lock_guard lock(stats_mutex_);
  return std::exchange(stats_, {});
}

std::vector<StateBuffer> Exchanger::state(std::uint64_t key) {
  std::lock_guard lock(groups_mutex_);
  const auto it = groups_.find(key);
  if (it == groups_.end()) return {};
  return it->second.reducer->state();
}

}  // namespace gradcomp::dist
