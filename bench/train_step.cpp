// The seed model (examples/mnist/model.hpp) at batch 128 on bench_threads() threads, fed random
// images in [0, 1) and labels in [0, 10); items = images:
//   typeflow_train_step   one training step: fetch total_loss and train_op (forward, gradients,
//                         Momentum 0.9 Nesterov update of the variables held by the session)
//   typeflow_forward      fetch total_loss only (for information)
//   typeflow_train_step_traced
//                         the training step with a step trace recording every run
//                         (session_options::trace): its cost against typeflow_train_step, and,
//                         with $TYPEFLOW_BENCH_PROFILE set to a file, the per-op profile of its
//                         runs (io/trace.hpp's make_profile, as markdown) written there
//   typeflow_train_step_bf16
//                         the training step with session_options::precision = bfloat16
//                         (convolutions and matmuls on bfloat16 operands, float32 accumulation;
//                         skipped where the CPU has no native bfloat16): its speed against
//                         typeflow_train_step
//   typeflow_train_step_saved16
//                         the training step of mixed_precision<bfloat16>(optimizer): the
//                         activations its gradients read kept in bfloat16, products float32
// With --serve (and no benchmark flags) it runs bench/run's interleaved race instead: after a
// sanity check and a warm-up it prints one JSON line with "ready", then runs the turns it reads
// from stdin ("run N": N training steps, answered with {"times": [seconds of each]}), the same
// protocol as bench/peers/common.py's serve().
// Each training step reports peak_MB: run_stats::peak_bytes of its session (the most bytes of
// intermediate buffers live at once, over all its runs) in 10^6 bytes.
// Compared with PyTorch eager by bench/torch_baselines.py.
#include "common.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "mnist/model.hpp"

namespace {

constexpr std::int64_t batch = 128;

/// The fixed batch: images in [0, 1), labels in [0, 10).
struct fixed_batch {
  ty::tensor<float> images{{batch, 28, 28, 1}};
  ty::tensor<std::int32_t> labels{{batch}};
  fixed_batch() {
    fill_uniform(images, 0, 1);
    std::mt19937 rng(7);
    for (auto& l : labels)
      l = static_cast<std::int32_t>(rng() % 10);
  }
  /// One run of session s on this batch, fetching `fetches`.
  template <class S, class... F>
  auto run(S& s, F... fetches) const {
    return s.run(ty::fetch(fetches...), ty::feed(mnist::images, images),
                 ty::feed(mnist::labels, labels));
  }
};

enum class mode { forward, train, traced, bf16, saved16 };

constexpr auto train_saved16 =
    ty::mixed_precision<ty::bfloat16>(mnist::optimizer).minimize(mnist::total_loss);

template <mode M>
void step(benchmark::State& state) {
  const fixed_batch data;
  ty::trace_recorder rec(ty::trace_recorder::options{.skip = 1});
  auto opts = bench_options();
  if constexpr (M == mode::traced)
    opts.trace = &rec;
  if constexpr (M == mode::bf16)
    opts.precision = ty::precision::bfloat16;
  ty::session s(opts);
  if (M == mode::bf16 && !s.products_in_bfloat16())
    return state.SkipWithError("no native bfloat16 on this CPU");
  const auto train = [] {
    if constexpr (M == mode::saved16)
      return train_saved16;
    else
      return mnist::train_op;
  }();
  s.initialize(train);
  const auto run = [&] {
    if constexpr (M != mode::forward)
      return data.run(s, mnist::total_loss, train);
    else
      return data.run(s, mnist::total_loss);
  };
  if (!std::isfinite(std::get<0>(run()).item()))
    return state.SkipWithError("the loss is not finite");
  for (auto _ : state)
    benchmark::DoNotOptimize(run());
  state.SetItemsProcessed(state.iterations() * batch);
  if constexpr (M != mode::forward)
    state.counters["peak_MB"] = static_cast<double>(s.stats().peak_bytes) / 1e6;
  if constexpr (M == mode::traced) {
    // Each repetition rewrites the file with its own runs: the last one's profile stays.
    if (const char* path = std::getenv("TYPEFLOW_BENCH_PROFILE")) {
      std::ofstream out(path);
      out << ty::make_profile(rec, ty::measure_roofline(bench_threads())).markdown();
      if (!out)
        state.SkipWithError("cannot write $TYPEFLOW_BENCH_PROFILE");
    }
  }
}

// Real time: the work runs on several threads.
BENCHMARK(step<mode::train>)->Name("typeflow_train_step")->UseRealTime();
BENCHMARK(step<mode::forward>)->Name("typeflow_forward")->UseRealTime();
BENCHMARK(step<mode::traced>)->Name("typeflow_train_step_traced")->UseRealTime();
BENCHMARK(step<mode::bf16>)->Name("typeflow_train_step_bf16")->UseRealTime();
BENCHMARK(step<mode::saved16>)->Name("typeflow_train_step_saved16")->UseRealTime();

/// `line` without the blanks around it.
std::string_view trimmed(std::string_view line) {
  const auto first = line.find_first_not_of(" \t\r");
  return first == std::string_view::npos
             ? std::string_view()
             : line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
}

/// The N of a command "run N" (N >= 1, the whole token), or 0.
std::size_t turn_steps(std::string_view command) {
  if (!command.starts_with("run "))
    return 0;
  const std::string_view arg = trimmed(command.substr(4));
  std::size_t n = 0;
  const auto [end, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), n);
  return ec == std::errc() && end == arg.data() + arg.size() ? n : 0;
}

/// bench/run's race (see the top of this file): the training step of typeflow_train_step.
int serve() {
  const fixed_batch data;
  ty::session s(bench_options());
  s.initialize(mnist::train_op);
  const auto step = [&] {
    return std::get<0>(data.run(s, mnist::total_loss, mnist::train_op)).item();
  };
  std::vector<double> losses; // the peers' sanity check: finite, and falling over 5 steps
  for (int i = 0; i < 5; ++i)
    losses.push_back(step());
  const bool finite = std::ranges::all_of(losses, [](double l) { return std::isfinite(l); });
  const bool ok = finite && losses.back() < losses.front();
  for (int i = 0; i < 5; ++i)
    step();
  // (nlohmann's dump writes a non-finite loss as null: JSON has no NaN.)
  const nlohmann::json ready = {
      {"ready", true},
      {"peer", "typeflow"},
      {"sanity", {{"losses", losses}, {"finite", finite}, {"decreasing", ok}}},
      {"ok", ok},
      {"threads", bench_threads()}};
  std::cout << ready.dump() << std::endl;
  for (std::string line; std::getline(std::cin, line);) {
    const std::string_view command = trimmed(line);
    if (command.empty() || command == "quit")
      break;
    const std::size_t n = turn_steps(command);
    if (n == 0) {
      std::cout << nlohmann::json{{"error", "unknown command"}}.dump() << std::endl;
      continue;
    }
    std::vector<double> times;
    for (std::size_t i = 0; i < n; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      step();
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::cout << nlohmann::json{{"times", times}}.dump() << std::endl;
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--serve") == 0)
    return serve();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
