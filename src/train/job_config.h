// What every rank of a `gradcomp train` run must agree on, as the fields of the
// start-up check (gradcomp/config_agreement.h, dist/config_check.h): everything that
// changes what the ranks exchange or how many times (world shape, topology, the
// compressor, the reducer, the layout, the model's every parameter shape, the schedule
// that decides the number of steps), and what makes replicas train alike (seed,
// optimizer). Per-host settings (data and checkpoint directories, threads, ports,
// metrics) are left out.
#pragma once

#include <span>

#include "gradcomp/config_agreement.h"
#include "gradcomp/method.h"
#include "train/job_options.h"
#include "train/layout.h"
#include "train/models.h"

namespace gradcomp::train {

// The model every rank (worker or parameter server) builds: the options' model with
// the data set's input shape and classes, seeded with the run's seed.
ModelConfig job_model_config(const JobOptions& o, const data::Dataset& shape_of);

// The fields, flags first and what is derived from them last (the model's parameters,
// the buckets), so that a differing flag is the difference reported.
ConfigFields job_config_fields(const JobOptions& o, const Method& method, int world_size,
                               Model& model, std::span<const BucketPlan> plan);

}  // namespace gradcomp::train
