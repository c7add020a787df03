#include <gtest/gtest.h>

#include "gradcomp/advise/models.h"
#include "gradcomp/error.h"
#include "train/models.h"

namespace gradcomp::train {
namespace {

TEST(Models, ShapesAndDeterministicInit) {
  for (const char* name : {"mlp", "lenet5", "resnet20"}) {
    ModelConfig cfg;
    cfg.name = name;
    cfg.mlp_hidden = {32, 16};
    cfg.in_c = 3;
    cfg.in_h = 16;
    cfg.in_w = 16;
    cfg.num_classes = 7;
    cfg.seed = 5;
    auto a = make_model(cfg);
    auto b = make_model(cfg);
    const torch::Tensor out = a->forward(torch::zeros({4, 3, 16, 16}));
    EXPECT_EQ(out.sizes(), (std::vector<std::int64_t>{4, 7})) << name;
    const auto pa = a->parameters();
    const auto pb = b->parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (std::size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i])) << name;
    cfg.seed = 6;
    auto c = make_model(cfg);
    EXPECT_FALSE(torch::equal(pa[0], c->parameters()[0])) << name;
  }
}

TEST(Models, ResNet20HasTwentyWeightLayers) {
  ModelConfig cfg;
  cfg.name = "resnet20";
  cfg.in_c = 3;
  cfg.in_h = 32;
  cfg.in_w = 32;
  auto m = make_model(cfg);
  int weighted = 0;
  std::int64_t count = 0;
  for (const auto& p : m->named_parameters()) {
    if (p.value().dim() >= 2) ++weighted;
    count += p.value().numel();
  }
  EXPECT_EQ(weighted, 20);
  EXPECT_EQ(count, 269722);  // He et al. report 0.27M (counted by hand, BN included)
}

// `gradcomp advise` plans with torch-free copies of these models (src/advise/models.cc):
// the same tensors, in the same order, for the trainer's default data (Fashion-MNIST).
TEST(Models, AdvisorsCopiesMatch) {
  for (const char* name : {"mlp", "lenet5", "resnet20"}) {
    ModelConfig cfg;  // defaults: 1 x 28 x 28, 10 classes, MLP 1536-1536
    cfg.name = name;
    auto m = make_model(cfg);
    const advise::ModelSizes copy = advise::builtin_model(name);
    const auto params = m->named_parameters();
    ASSERT_EQ(params.size(), copy.params.size()) << name;
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto& p = params[i];
      const ParamInfo& c = copy.params[i];
      EXPECT_EQ(p.key(), c.name) << name;
      EXPECT_EQ(p.value().numel(), c.numel) << name << " " << p.key();
      EXPECT_EQ(p.value().dim(), c.dim) << name << " " << p.key();
      EXPECT_EQ(p.value().dim() > 0 ? p.value().size(0) : 0, c.rows) << name << " " << p.key();
    }
  }
}

TEST(Models, RejectsBadConfigs) {
  ModelConfig cfg;
  cfg.name = "vgg";
  EXPECT_THROW(make_model(cfg), InvalidArgument);
  cfg.name = "lenet5";
  cfg.in_h = 8;
  EXPECT_THROW(make_model(cfg), InvalidArgument);
  EXPECT_EQ(parse_widths("1536,1536"), (std::vector<std::int64_t>{1536, 1536}));
  EXPECT_THROW(parse_widths("1536,"), InvalidArgument);
  EXPECT_THROW(parse_widths("0"), InvalidArgument);
  EXPECT_THROW(parse_widths("12x"), InvalidArgument);
}

}  // namespace
}  // namespace gradcomp::train
