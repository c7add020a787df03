#include "train/rank_setup.h"

#include <string>

#include "gradcomp/error.h"
#include "train/role.h"

namespace gradcomp::train {

dist::Communicator connect_rank(const dist::RendezvousConfig& rc) {
  if (store_hosted_by_launcher() && rc.world_size > 1) {
    return dist::Communicator(dist::Store::tcp_client(rc.master_addr, rc.master_port, rc.timeout),
                              rc);
  }
  return dist::Communicator::connect(rc);
}

dist::PsConfig ps_config(const JobOptions& o, int world) {
  dist::PsConfig c;
  c.topology = o.topology;
  c.servers = o.servers;
  c.workers = world - o.servers;
  c.compressor = o.compressor;
  c.downlink = o.downlink;
  c.max_staleness = o.max_staleness;
  c.async_momentum = o.async_momentum;
  c.split_elements = o.split_elements;
  c.seed = o.train.seed;
  c.momentum = train_momentum(o.train);
  c.nesterov = train_nesterov(o.train);
  c.weight_decay = o.train.sgd.weight_decay;
  if (c.workers < 1) {
    throw InvalidArgument("--servers " + std::to_string(o.servers) +
                          " leaves no worker in a world of " + std::to_string(world) + " ranks");
  }
  return c;
}

}  // namespace gradcomp::train
