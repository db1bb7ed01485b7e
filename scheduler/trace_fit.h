#pragma once
// Fitting a device model to a measured step (issue 5: "when GPU measurements exist, the H200 model is
// compared with them and corrected"; docs/SIMULATOR.md). Given a program and the timeline of one of its
// steps as a backend ran it (`run --trace`, cpu or cuda), it reads off the figures the cost model
// assumes:
//  - dispatch: the gap between a worker's task and its next one, when the next was ready before the
//    first started;
//  - signal: from the last input's producer ending to the waiting task starting, when it had to wait;
//  - bandwidth: the bytes of the weight-streaming tasks that did not wait, over the time they ran, times
//    the workers (the model gives a task alone an even share of the bandwidth; a waiting worker fetches
//    weights, so a task that waited runs shorter than its bytes take), over the share of the time the
//    base device's stalls leave the workers; and each worker's own, for devices whose workers are not
//    alike (DeviceModel::worker_speed).
// Peak flops and the link are kept from the base device: a decode step is memory-bound.
#include <cstdint>
#include <vector>

#include "scheduler/cost_model.h"
#include "scheduler/program.h"
#include "scheduler/simulator.h"

namespace tilefire {

// The median of samples (the upper one of an even count), 0 for none: fits and the cpu device's
// calibration describe a typical step, as `bench` reports the median step.
double median(std::vector<double> samples);

struct DeviceFit {
  DeviceModel device;           // the base device with the fitted figures
  double observed_step_ns = 0;  // first start to last end of the observed step
  uint32_t dispatch_samples = 0, signal_samples = 0, streaming_tasks = 0;
  // Per worker: the GB/s its own streaming tasks ran at (0: it ran none that did not wait). When the base
  // device has worker speeds, the fitted device's are these over their mean, and its bandwidth their sum.
  std::vector<double> worker_gbs;
};

// Sets `device`'s bandwidth to the sum of its workers' rates (GB/s each; 0: none seen, which gets the
// device's present bandwidth over its workers) and its worker_speed to their ratios (mean 1).
void set_worker_rates(DeviceModel& device, std::vector<double> worker_gbs);

// `observed` holds every task of `program` once (task, worker, start and end in ns; any origin). The
// tasks' bytes are the cost model's at `context` positions. Throws InputError when the timeline does not
// fit the program (a task missing or repeated, a worker outside the program's, an end before its start).
DeviceFit fit_device(const Program& program, const std::vector<SimulatedTask>& observed, uint32_t context,
                     const DeviceModel& base, uint32_t sequences = 1);

}  // namespace tilefire
