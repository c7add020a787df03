// The comparison behind the ranks' configuration check (gradcomp/config_agreement.h):
// the exact one-line messages, every kind of difference, and the byte format the ranks
// exchange.
#include "gradcomp/config_agreement.h"

#include <gtest/gtest.h>

#include "gradcomp/error.h"

namespace gradcomp {
namespace {

ConfigFields mlp(const std::string& first_shape) {
  return {{"world size", "2"},
          {"compressor", "ef(topk:ratio=0.01)"},
          {"model parameters", "6"},
          {"model parameter 1 (fc1.weight) shape", first_shape},
          {"model parameter 2 (fc1.bias) shape", "[256]"}};
}

TEST(ConfigAgreement, IdenticalRanksAgree) {
  const std::vector<ConfigFields> ranks = {mlp("[256, 784]"), mlp("[256, 784]"), mlp("[256, 784]")};
  EXPECT_EQ(find_config_disagreement(ranks), std::nullopt);
  EXPECT_EQ(find_config_disagreement(std::span(ranks).first(1)), std::nullopt);
  EXPECT_EQ(find_config_disagreement({}), std::nullopt);
}

TEST(ConfigAgreement, NamesTheFieldBothValuesAndTheRanks) {
  const std::vector<ConfigFields> ranks = {mlp("[256, 784]"), mlp("[512, 784]")};
  EXPECT_EQ(find_config_disagreement(ranks),
            "ranks disagree on model parameter 1 (fc1.weight) shape: rank 0 has [256, 784], "
            "rank 1 has [512, 784]");
}

TEST(ConfigAgreement, TheFirstDifferingFieldIsReported) {
  auto a = mlp("[256, 784]");
  auto b = mlp("[512, 784]");
  b[1].value = "2bit";  // an earlier field differs too: it is the one named
  EXPECT_EQ(find_config_disagreement(std::vector{a, b}),
            "ranks disagree on compressor: rank 0 has ef(topk:ratio=0.01), rank 1 has 2bit");
}

TEST(ConfigAgreement, ListsEveryOtherRankThatDiffers) {
  std::vector<ConfigFields> ranks(12, mlp("[256, 784]"));
  for (std::size_t r : {2, 3, 5, 6, 7, 8, 9, 10, 11}) ranks[r][0].value = "12";
  ranks[1][0].value = "12";
  ranks[1][0].value = "2";  // rank 1 agrees
  EXPECT_EQ(find_config_disagreement(ranks),
            "ranks disagree on world size: rank 0 has 2, rank 2 has 12 (rank 0's value "
            "differs on ranks 3, 5, 6, 7, 8, 9, 10, 11 too)");
  ranks[4][0].value = "12";
  EXPECT_NE(find_config_disagreement(ranks)->find("ranks 3, 4, 5, 6, 7, 8, 9, 10 and more too"),
            std::string::npos);
}

TEST(ConfigAgreement, MissingFieldsReadAsNone) {
  auto a = mlp("[256, 784]");
  auto b = a;
  b.pop_back();
  EXPECT_EQ(find_config_disagreement(std::vector{a, b}),
            "ranks disagree on model parameter 2 (fc1.bias) shape: rank 0 has [256], rank 1 "
            "has (none)");
  EXPECT_EQ(find_config_disagreement(std::vector{b, a}),
            "ranks disagree on model parameter 2 (fc1.bias) shape: rank 0 has (none), rank 1 "
            "has [256]");
}

TEST(ConfigAgreement, MisalignedFieldListsAreNamed) {
  auto a = mlp("[256, 784]");
  auto b = a;
  b[1].name = "reducer";
  const auto line = find_config_disagreement(std::vector{a, b});
  ASSERT_TRUE(line);
  EXPECT_EQ(*line,
            "ranks disagree on which settings they compare: setting 1 is 'compressor' on rank "
            "0 and 'reducer' on rank 1 (are they running the same gradcomp build?)");
}

TEST(ConfigAgreement, SerializationRoundTrips) {
  ConfigFields f = mlp("[256, 784]");
  f.push_back({"", ""});
  f.push_back({"bytes", std::string("a\0b\n", 4)});
  const auto bytes = serialize_config(f);
  const ConfigFields back = parse_config(bytes, 3);
  ASSERT_EQ(back.size(), f.size());
  for (std::size_t i = 0; i < f.size(); ++i) {
    EXPECT_EQ(back[i].name, f[i].name);
    EXPECT_EQ(back[i].value, f[i].value);
  }
  EXPECT_TRUE(parse_config(serialize_config({}), 0).empty());
}

TEST(ConfigAgreement, MalformedBytesAreRejectedNamingTheRank) {
  const auto bytes = serialize_config(mlp("[256, 784]"));
  for (std::size_t len = 0; len < bytes.size(); ++len) {
    try {
      (void)parse_config(std::span(bytes).first(len), 5);
      FAIL() << "accepted a truncation to " << len << " bytes";
    } catch (const CorruptMessage& e) {
      EXPECT_EQ(std::string(e.what()).rfind("configuration of rank 5: ", 0), 0u) << e.what();
    }
  }
  auto longer = bytes;
  longer.push_back(std::byte{0});
  EXPECT_THROW((void)parse_config(longer, 1), CorruptMessage);
  std::vector<std::byte> huge_count(8, std::byte{0xFF});
  EXPECT_THROW((void)parse_config(huge_count, 1), CorruptMessage);
}

}  // namespace
}  // namespace gradcomp
