#include <gtest/gtest.h>

#include <cmath>

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
// the same tensors, in the same order, for the trainer's default data (Fashion-MNIST; the
// transformer's, fortunes).
TEST(Models, AdvisorsCopiesMatch) {
  for (const char* name : {"mlp", "lenet5", "resnet20", "transformer"}) {
    ModelConfig cfg;  // defaults: 1 x 28 x 28, 10 classes, MLP 1536-1536
    cfg.name = name;
    if (cfg.name == "transformer") {  // fortunes: windows of context 64 + 1 bytes
      cfg.in_w = 65;
      cfg.in_h = 1;
      cfg.num_classes = 256;
    }
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

// The byte-level language model: one row of logits per predicted byte, targets the next
// bytes, causal (a later byte changes no earlier prediction), deterministic from the seed.
TEST(Models, TransformerIsACausalByteLanguageModel) {
  ModelConfig cfg;
  cfg.name = "transformer";
  cfg.in_c = 1;
  cfg.in_h = 1;
  cfg.in_w = 65;  // context 64
  cfg.num_classes = 256;
  cfg.seed = 3;
  auto m = make_model(cfg);
  EXPECT_TRUE(m->language_model());
  std::int64_t count = 0;
  for (const auto& p : m->parameters()) count += p.numel();
  // Embeddings 256x128 + 64x128, 4 blocks of 198,272, the final LayerNorm; output tied.
  EXPECT_EQ(count, 834304);
  EXPECT_EQ(m->named_parameters().begin()->key(), "tok.weight");
  EXPECT_EQ((m->named_parameters().end() - 1)->key(), "ln_f.bias");

  const torch::Tensor x = torch::randint(0, 256, {3, 1, 1, 65}).to(torch::kFloat);
  m->eval();
  const torch::Tensor logits = m->forward(x);
  EXPECT_EQ(logits.sizes(), (std::vector<std::int64_t>{3 * 64, 256}));
  const torch::Tensor t = m->targets(x, torch::zeros({3}, torch::kLong));
  EXPECT_EQ(t.sizes(), (std::vector<std::int64_t>{3 * 64}));
  EXPECT_EQ(t[0].item<std::int64_t>(), x[0][0][0][1].item<std::int64_t>());
  EXPECT_EQ(t[64].item<std::int64_t>(), x[1][0][0][1].item<std::int64_t>());
  EXPECT_EQ(t[3 * 64 - 1].item<std::int64_t>(), x[2][0][0][64].item<std::int64_t>());

  // Changing byte 40 of the first window leaves the predictions at positions 0..39.
  torch::Tensor y = x.clone();
  y[0][0][0][40] = static_cast<float>((x[0][0][0][40].item<std::int64_t>() + 1) % 256);
  const torch::Tensor changed = m->forward(y);
  using torch::indexing::Slice;
  EXPECT_TRUE(torch::equal(changed.index({Slice(0, 40)}), logits.index({Slice(0, 40)})));
  EXPECT_FALSE(torch::allclose(changed.index({Slice(40, 64)}), logits.index({Slice(40, 64)})));
  // The input's 65th byte is only ever a target.
  y = x.clone();
  y[0][0][0][64] = static_cast<float>((x[0][0][0][64].item<std::int64_t>() + 1) % 256);
  EXPECT_TRUE(torch::equal(m->forward(y), logits));

  auto same = make_model(cfg);
  EXPECT_TRUE(torch::equal(same->parameters()[3], m->parameters()[3]));
  // The untrained model guesses close to uniformly: loss near ln 256.
  const double loss = at::cross_entropy_loss(logits, t).item<double>();
  EXPECT_NEAR(loss, std::log(256.0), 0.1);
}

TEST(Models, TransformerRejectsImagesAndBadShapes) {
  ModelConfig cfg;
  cfg.name = "transformer";  // the defaults are 1 x 28 x 28 images
  EXPECT_THROW(make_model(cfg), InvalidArgument);
  cfg.in_h = 1;
  cfg.in_w = 33;
  cfg.num_classes = 256;
  EXPECT_NO_THROW(make_model(cfg));
  cfg.transformer.heads = 3;  // does not divide 128
  EXPECT_THROW(make_model(cfg), InvalidArgument);
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
