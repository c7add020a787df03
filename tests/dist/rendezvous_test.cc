// rendezvous_from_env: flags over torchrun / mpirun / Slurm variables, bad values.
#include <gtest/gtest.h>

#include <string>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/error.h"

namespace gradcomp::dist {
namespace {

std::string error_of(const RendezvousFlags& flags, const Environment& env) {
  try {
    rendezvous_from_env(flags, env);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(Rendezvous, Torchrun) {
  const Environment env = {{"RANK", "2"},
                           {"WORLD_SIZE", "4"},
                           {"MASTER_ADDR", "node7"},
                           {"MASTER_PORT", "29400"},
                           {"GLOO_SOCKET_IFNAME", "eth1"}};
  const auto c = rendezvous_from_env({}, env);
  EXPECT_EQ(c.rank, 2);
  EXPECT_EQ(c.world_size, 4);
  EXPECT_EQ(c.master_addr, "node7");
  EXPECT_EQ(c.master_port, 29400);
  EXPECT_EQ(c.interface, "eth1");
  EXPECT_EQ(c.timeout, std::chrono::milliseconds(60'000));
}

TEST(Rendezvous, MpirunAndSlurm) {
  auto c = rendezvous_from_env({}, {{"OMPI_COMM_WORLD_RANK", "1"},
                                    {"OMPI_COMM_WORLD_SIZE", "3"},
                                    {"MASTER_ADDR", "10.0.0.1"},
                                    {"MASTER_PORT", "1234"}});
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.world_size, 3);
  c = rendezvous_from_env({}, {{"SLURM_PROCID", "7"},
                               {"SLURM_NTASKS", "8"},
                               {"MASTER_ADDR", "n1"},
                               {"MASTER_PORT", "1"},
                               {"GRADCOMP_TIMEOUT_MS", "2500"}});
  EXPECT_EQ(c.rank, 7);
  EXPECT_EQ(c.world_size, 8);
  EXPECT_EQ(c.timeout, std::chrono::milliseconds(2500));
  // torchrun inside a Slurm allocation: torchrun's variables win, consistently.
  c = rendezvous_from_env({}, {{"RANK", "0"},
                               {"WORLD_SIZE", "2"},
                               {"SLURM_PROCID", "5"},
                               {"SLURM_NTASKS", "6"},
                               {"MASTER_ADDR", "n1"},
                               {"MASTER_PORT", "99"}});
  EXPECT_EQ(c.rank, 0);
  EXPECT_EQ(c.world_size, 2);
}

TEST(Rendezvous, FlagsOverrideEnvironment) {
  RendezvousFlags f;
  f.rank = "0";
  f.world_size = "2";
  f.master_addr = "127.0.0.1";
  f.master_port = "5555";
  f.timeout_ms = "100";
  f.interface = "lo";
  const auto c = rendezvous_from_env(f, {{"RANK", "3"},
                                         {"WORLD_SIZE", "4"},
                                         {"MASTER_ADDR", "x"},
                                         {"MASTER_PORT", "1"},
                                         {"GLOO_SOCKET_IFNAME", "eth0"}});
  EXPECT_EQ(c.rank, 0);
  EXPECT_EQ(c.world_size, 2);
  EXPECT_EQ(c.master_addr, "127.0.0.1");
  EXPECT_EQ(c.master_port, 5555);
  EXPECT_EQ(c.timeout, std::chrono::milliseconds(100));
  EXPECT_EQ(c.interface, "lo");
}

TEST(Rendezvous, SingleProcessNeedsNoAddress) {
  const auto c = rendezvous_from_env({}, {{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_EQ(c.world_size, 1);
  EXPECT_EQ(c.master_addr, "127.0.0.1");
}

TEST(Rendezvous, BadValuesNameTheirSource) {
  const Environment base = {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
  auto with = [&](Environment extra) {
    for (const auto& kv : base) extra.insert(kv);
    return extra;
  };
  EXPECT_NE(error_of({}, with({{"WORLD_SIZE", "2"}})).find("no rank"), std::string::npos);
  EXPECT_NE(error_of({}, with({{"RANK", "0"}})).find("no world size"), std::string::npos);
  EXPECT_NE(error_of({}, with({{"RANK", "2"}, {"WORLD_SIZE", "2"}}))
                .find("rank 2 (RANK) >= world size 2"),
            std::string::npos);
  EXPECT_NE(error_of({}, with({{"RANK", "one"}, {"WORLD_SIZE", "2"}}))
                .find("RANK='one' is not an integer"),
            std::string::npos);
  EXPECT_NE(error_of({}, with({{"RANK", "1x"}, {"WORLD_SIZE", "2"}})).find("not an integer"),
            std::string::npos);
  EXPECT_NE(error_of({}, with({{"RANK", ""}, {"WORLD_SIZE", "2"}})).find("not an integer"),
            std::string::npos);
  EXPECT_NE(error_of({}, with({{"RANK", "-1"}, {"WORLD_SIZE", "2"}})).find("outside"),
            std::string::npos);
  EXPECT_NE(error_of({}, with({{"RANK", "0"}, {"WORLD_SIZE", "0"}})).find("WORLD_SIZE=0 outside"),
            std::string::npos);
  EXPECT_NE(error_of({}, {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}})
                .find("master address"),
            std::string::npos);
  EXPECT_NE(
      error_of({}, {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}).find("master port"),
      std::string::npos);
  EXPECT_NE(
      error_of({},
               {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}})
          .find("MASTER_PORT=70000 outside [1, 65535]"),
      std::string::npos);
  EXPECT_NE(error_of({}, with({{"RANK", "0"}, {"SLURM_NTASKS", "2"}})).find("inconsistent"),
            std::string::npos);
  RendezvousFlags f;
  f.rank = "abc";
  EXPECT_NE(error_of(f, with({{"RANK", "0"}, {"WORLD_SIZE", "2"}})).find("--rank='abc'"),
            std::string::npos);
  f = {};
  f.timeout_ms = "0";
  EXPECT_NE(error_of(f, with({{"RANK", "0"}, {"WORLD_SIZE", "2"}})).find("--timeout-ms=0 outside"),
            std::string::npos);
}

}  // namespace
}  // namespace gradcomp::dist
