// The scale sweep: the step model over a grid of worker counts and bandwidths, where
// each method stops paying (speedup over dense <= 1) and where an allgathered method
// falls behind the allreduce-able ones. Torch-free.
#pragma once

#include <string>
#include <vector>

#include "gradcomp/advise/step_model.h"

namespace gradcomp::advise {

struct SweepGrid {
  std::vector<int> workers;        // e.g. 2, 4, ..., 1024
  std::vector<double> bandwidths;  // bytes per second
};

// W = 2, 4, ..., 1024; 100 Mbit/s, 1, 10, 25 and 100 Gbit/s.
SweepGrid default_grid();

struct SweepCell {
  int workers = 0;
  double bandwidth = 0.0;
  std::vector<Prediction> ranked;  // predict_all's order
};

// The scenario's other fields (latency, compute, cores, ...) held fixed.
std::vector<SweepCell> run_sweep(const std::vector<MethodPlan>& plans, const Scenario& base,
                                 const SpeedTable& speeds, const SweepGrid& grid);

// Per bandwidth and method: the worker counts of the grid at which it beats dense.
struct PaysRange {
  double bandwidth = 0.0;
  std::string spec;
  std::string family;    // the label the table prints
  int first_paying = 0;  // 0: never in the grid
  int last_paying = 0;
  bool contiguous = true;       // every W between first and last pays
  double speedup_at_min = 0.0;  // at the smallest W of the grid
  double speedup_at_max = 0.0;  // at the largest
};

// An allgathered method (not traits.all_allreduce) overtaken by an allreduce-able one that was
// slower at the grid's smallest W: from which W on, at this bandwidth.
struct Overtake {
  double bandwidth = 0.0;
  std::string allgathered;
  std::string overtaken_by;
  int from_workers = 0;
};

std::vector<PaysRange> pays_ranges(const std::vector<SweepCell>& cells);
std::vector<Overtake> overtakes(const std::vector<SweepCell>& cells);

// Markdown tables: where each method pays; who overtakes the allgathered methods; the
// fastest method per (bandwidth, W).
std::string format_sweep(const std::vector<SweepCell>& cells, const std::string& model);

// Step time against W (one panel per bandwidth in `at_bandwidths`) and against bandwidth
// (at `at_workers`).
std::string sweep_svg(const std::vector<SweepCell>& cells, const std::string& title,
                      const std::vector<double>& at_bandwidths, int at_workers);

}  // namespace gradcomp::advise
