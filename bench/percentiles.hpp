#pragma once
// The median and 99th percentile of a benchmark's samples, plainly or block by block, and the
// median of a figure measured in segments.

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace gpumem::bench {

struct summary {
  double median = 0;
  double p99 = 0;
};

inline summary summarise(std::vector<double> samples) {
  if (samples.empty()) return {};
  std::sort(samples.begin(), samples.end());
  return {samples[samples.size() / 2],
          samples[std::min(samples.size() - 1, samples.size() * 99 / 100)]};
}

/// The samples, in the order taken, cut into this many blocks: each block's median and p99,
/// and the median block's of each is the figure. Other work on the machine (a build beside the
/// benchmark, a neighbour of the virtual machine) comes in bursts: a burst moves one block, not
/// the figure.
constexpr std::size_t kBlocks = 5;
/// Fewer samples than this per block give a p99 of one or two samples: summarised plainly.
constexpr std::size_t kLeastPerBlock = 100;

inline summary summarise_blockwise(const std::vector<double>& samples) {
  const std::size_t block = samples.size() / kBlocks;
  if (block < kLeastPerBlock) return summarise(samples);
  std::vector<double> medians;
  std::vector<double> p99s;
  for (std::size_t i = 0; i < kBlocks; ++i) {
    const auto first = samples.begin() + static_cast<std::ptrdiff_t>(i * block);
    const summary each = summarise({first, first + static_cast<std::ptrdiff_t>(block)});
    medians.push_back(each.median);
    p99s.push_back(each.p99);
  }
  return {summarise(medians).median, summarise(p99s).median};
}

/// A rate or mean measured in one stretch of tens of milliseconds is moved by whatever else ran
/// in that stretch: on the GPU machine one run of the benchmark read 34 GB/s for a copy loop
/// that reads 200-270 GB/s in the next. Such figures are measured in this many segments after
/// one untimed segment (the driver's first use of a path, lazy module loading, cold caches).
constexpr int kSegments = 5;

/// The median of the kSegments values @p segment(k) returns for k = 1..kSegments, after it ran
/// once untimed as segment 0. A party of a multi-process figure calls it with the same count
/// as its peers, so that each segment of one meets the same segment of the other.
template <typename Segment>
double median_of_segments(Segment&& segment) {
  segment(0);
  std::vector<double> values;
  for (int k = 1; k <= kSegments; ++k) values.push_back(segment(k));
  return summarise(std::move(values)).median;
}

}  // namespace gpumem::bench
