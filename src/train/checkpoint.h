// Checkpoints of a LibTorch training state; the file format (layout, validation) is in
// checkpoint_file.h.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <span>
#include <vector>

#include "gradcomp/memory.h"
#include "train/checkpoint_file.h"
#include "train/optimizer.h"

namespace gradcomp::train {

// Parameters and buffers only (gradcomp eval).
CheckpointMeta load_model_from_checkpoint(const std::filesystem::path& file,
                                          torch::nn::Module& model);

// The arrays of a training state, named "param/<name>", "buffer/<name>", the optimizer's
// (Optimizer::state: "momentum/<param name>" for SGD, "adamw.exp_avg/<param name>", ...
// for AdamW), "memory/<state name>". Parameters and buffers must be
// contiguous CPU float32 (buffers may also be int64, e.g. BatchNorm's batch counter).
std::vector<ArrayView> training_arrays(torch::nn::Module& model, Optimizer& optimizer,
                                       std::span<const StateBuffer> memory_state);

// keep_previous: write_checkpoint's (the existing FILE moves there once the new one is
// written).
void save_checkpoint(const std::filesystem::path& file, const CheckpointMeta& meta,
                     torch::nn::Module& model, Optimizer& optimizer,
                     std::span<const StateBuffer> memory_state,
                     const std::filesystem::path& keep_previous = {});
CheckpointMeta load_checkpoint(const std::filesystem::path& file, torch::nn::Module& model,
                               Optimizer& optimizer, std::span<const StateBuffer> memory_state);

}  // namespace gradcomp::train
