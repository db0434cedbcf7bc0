// The machine's float32 FMA peak, the ceiling that bench/run sets typeflow's training step
// against: each thread runs its own loop of fused multiply-adds on xsimd's widest batch for
// -march=native (AVX-512 where the CPU has it) into 16 independent accumulators, enough to cover
// the FMA latency times the FMA units of any current x86 or Arm core (AMD Zen 4: 4 cycles x 2
// units of 256 bits, a 512-bit FMA taking both). acc = acc * a + b with a, b read through
// volatile and the sums kept, so nothing folds away; the values converge to about 1 (no
// denormals, no overflow; a sum that is not finite fails the benchmark).
//   fma_peak/T   T = 1 and T = bench_threads() threads (typeflow's pool, as the baselines);
//                items/s = FLOP/s (2 per lane per FMA); the label names the instruction set.
#include "common.hpp"

#include <utility>
#include <vector>

#include <xsimd/xsimd.hpp>

namespace {

using batch = xsimd::batch<float>;
constexpr std::size_t accumulators = 16;
constexpr std::int64_t iterations = 1 << 20; // per thread and benchmark iteration: ~6 ms

template <std::size_t... I>
float fma_loop(float a, float b, std::int64_t n, std::index_sequence<I...>) {
  batch acc[] = {batch(static_cast<float>(I) / accumulators)...};
  const batch va(a), vb(b);
  for (std::int64_t i = 0; i < n; ++i)
    ((acc[I] = xsimd::fma(acc[I], va, vb)), ...);
  return xsimd::hadd((acc[I] + ...));
}

void fma_peak(benchmark::State& state) {
  const auto threads = state.range(0);
  auto& pool = bench_pool();
  // Read through volatile so that the optimizer cannot fold the loop (benchmark::DoNotOptimize
  // on these locals let g++ 12 drop the store of `a` before the lambda read it).
  volatile float a_in = 0.9999f, b_in = 1e-4f;
  const float a = a_in, b = b_in;
  std::vector<float> sums(static_cast<std::size_t>(threads));
  const auto kernel = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t)
      sums[static_cast<std::size_t>(t)] =
          fma_loop(a, b, iterations, std::make_index_sequence<accumulators>{});
  };
  for (auto _ : state) {
    pool.parallel_for(threads, 1, kernel);
    benchmark::DoNotOptimize(sums.data());
    benchmark::ClobberMemory();
  }
  for (float s : sums)
    if (!std::isfinite(s))
      return state.SkipWithError("the accumulators are not finite");
  state.SetItemsProcessed(state.iterations() * threads * iterations *
                          static_cast<std::int64_t>(accumulators * batch::size * 2));
  state.SetLabel(std::string(xsimd::default_arch::name()) + ", " + std::to_string(batch::size) +
                 " lanes");
}

// Real time: the work runs on several threads.
BENCHMARK(fma_peak)->UseRealTime()->Apply([](benchmark::internal::Benchmark* b) {
  b->Arg(1);
  if (bench_threads() > 1)
    b->Arg(bench_threads());
});

} // namespace
