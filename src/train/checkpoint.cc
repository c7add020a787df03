#include "train/checkpoint.h"

#include "gradcomp/error.h"

namespace gradcomp::train {

CheckpointMeta load_model_from_checkpoint(const std::filesystem::path& file,
                                          torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  std::vector<ArrayView> arrays;
  for (const auto& p : model.named_parameters()) {
    const torch::Tensor& t = p.value();
    arrays.push_back({"param/" + p.key(), ArrayType::kFloat32, t.data_ptr(),
                      static_cast<std::size_t>(t.numel())});
  }
  for (const auto& b : model.named_buffers()) {
    const torch::Tensor& t = b.value();
    arrays.push_back({"buffer/" + b.key(),
                      t.scalar_type() == torch::kLong ? ArrayType::kInt64 : ArrayType::kFloat32,
                      t.data_ptr(), static_cast<std::size_t>(t.numel())});
  }
  return read_checkpoint_subset(file, arrays);
}

std::vector<ArrayView> training_arrays(torch::nn::Module& model, Optimizer& optimizer,
                                       std::span<const StateBuffer> memory_state) {
  std::vector<ArrayView> out;
  auto add_tensor = [&out](const std::string& name, const torch::Tensor& t) {
    if (!t.device().is_cpu() || !t.is_contiguous()) {
      throw InvalidArgument("checkpoint: " + name + " is not a contiguous CPU tensor");
    }
    if (t.scalar_type() == torch::kFloat) {
      out.push_back({name, ArrayType::kFloat32, t.data_ptr(), static_cast<std::size_t>(t.numel())});
    } else if (t.scalar_type() == torch::kLong) {
      out.push_back({name, ArrayType::kInt64, t.data_ptr(), static_cast<std::size_t>(t.numel())});
    } else {
      throw InvalidArgument("checkpoint: " + name + " is neither float32 nor int64");
    }
  };
  const auto params = model.named_parameters();
  for (const auto& p : params) add_tensor("param/" + p.key(), p.value());
  for (const auto& b : model.named_buffers()) add_tensor("buffer/" + b.key(), b.value());
  if (optimizer.params().size() != params.size()) {
    throw InvalidArgument("checkpoint: the optimizer holds " +
                          std::to_string(optimizer.params().size()) + " parameters, the model " +
                          std::to_string(params.size()));
  }
  std::vector<std::string> names;
  names.reserve(params.size());
  for (const auto& p : params) names.push_back(p.key());
  for (const OptimizerState& s : optimizer.state(names)) add_tensor(s.name, s.tensor);
  for (const StateBuffer& s : memory_state) {
    out.push_back({"memory/" + s.name, ArrayType::kFloat32, s.data.data(), s.data.size()});
  }
  return out;
}

void save_checkpoint(const std::filesystem::path& file, const CheckpointMeta& meta,
                     torch::nn::Module& model, Optimizer& optimizer,
                     std::span<const StateBuffer> memory_state,
                     const std::filesystem::path& keep_previous) {
  const std::vector<ArrayView> arrays = training_arrays(model, optimizer, memory_state);
  write_checkpoint(file, meta, arrays, keep_previous);
}

CheckpointMeta load_checkpoint(const std::filesystem::path& file, torch::nn::Module& model,
                               Optimizer& optimizer, std::span<const StateBuffer> memory_state) {
  torch::NoGradGuard no_grad;
  const std::vector<ArrayView> arrays = training_arrays(model, optimizer, memory_state);
  return read_checkpoint(file, arrays);
}

}  // namespace gradcomp::train
