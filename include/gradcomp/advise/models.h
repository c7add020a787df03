// The gradients the advisor plans for: built-in models as their parameter tensors'
// shapes (torch-free copies of src/train/models.cc's MLP, LeNet-5, ResNet-20 and
// transformer LM, plus torchvision's ResNet-50 for planning), or shapes the user gives.
//
// Keep in step with src/train/models.cc: tests/train/models_test.cc
// (Models.AdvisorsCopiesMatch) compares mlp, lenet5, resnet20 and transformer tensor by
// tensor with the LibTorch models, and tests/advise/advise_test.cc pins every model's
// parameter count.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gradcomp/layout.h"

namespace gradcomp::advise {

struct ModelSizes {
  std::string name;
  std::vector<ParamInfo> params;  // parameter order, as named_parameters() lists them
  std::int64_t numel() const;
};

// "mlp" (784-1536-1536-10, Fashion-MNIST), "lenet5" (1x28x28 input), "resnet20" (1 input
// channel: the trainer's Fashion-MNIST), "resnet50" (torchvision's, 1000 classes, 25.6 M),
// "transformer" (the trainer's byte-level LM on fortunes: context 64, 834 k).
// InvalidArgument for another name, listing the known ones.
ModelSizes builtin_model(std::string_view name);
std::string known_models();  // "lenet5, mlp, resnet20, resnet50, transformer"

// Shapes written as "1000,784x1536,64x3x7x7": items separated by commas, spaces or new
// lines; an item is a tensor's shape, dimensions joined by 'x' (the first is its rows).
// '#' starts a comment to the end of the line. InvalidArgument on anything else.
ModelSizes parse_sizes(std::string_view text, std::string name = "sizes");

}  // namespace gradcomp::advise
