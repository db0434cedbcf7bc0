// The dropout hash, shared by the CPU and CUDA backends so that both draw the same masks.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "../../core/dtype.hpp"
#include "../../core/error.hpp"

namespace typeflow::backend {

/// splitmix64's finalizer, after adding its increment.
TYPEFLOW_HD inline std::uint64_t dropout_mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
/// The hash state of one run of one dropout layer.
TYPEFLOW_HD inline std::uint64_t dropout_base(std::uint64_t seed, std::uint64_t run) {
  return dropout_mix(dropout_mix(seed) ^ run);
}
/// Element i's draw, uniform in [0, 1) on a 2^-53 grid (exact in double on host and device).
TYPEFLOW_HD inline double dropout_uniform(std::uint64_t base, std::int64_t i) {
  return static_cast<double>(dropout_mix(base ^ static_cast<std::uint64_t>(i)) >> 11) * 0x1.0p-53;
}
/// The integer form of a keep probability: draw i is kept where its 53 bits are below
/// keep * 2^53 rounded up (the same test as dropout_uniform(base, i) < keep, in integers, which
/// a compiler vectorizes). What the attention kernels of both backends test.
inline std::uint64_t dropout_below(double keep) {
  return static_cast<std::uint64_t>(std::ceil(keep * 0x1.0p53));
}
/// Whether draw i of `base` is kept under threshold `below` (dropout_below).
TYPEFLOW_HD inline bool dropout_kept(std::uint64_t base, std::uint64_t i, std::uint64_t below) {
  return (dropout_mix(base ^ i) >> 11) < below;
}
/// keep_prob must be in (0, 1].
inline void check_keep_prob(double keep) {
  if (!(keep > 0.0 && keep <= 1.0))
    throw error("dropout: keep_prob must be in (0, 1], got " + std::to_string(keep));
}

} // namespace typeflow::backend
