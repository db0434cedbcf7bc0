// The seed model (examples/mnist/model.hpp) at batch 128 on bench_threads() threads, fed random
// images in [0, 1) and labels in [0, 10); items = images:
//   typeflow_train_step   one training step: fetch total_loss and train_op (forward, gradients,
//                         Momentum 0.9 Nesterov update of the variables held by the session)
//   typeflow_forward      fetch total_loss only (for information)
// Compared with PyTorch eager by bench/torch_baselines.py.
#include "common.hpp"

#include "mnist/model.hpp"

namespace {

constexpr std::int64_t batch = 128;

template <bool Train>
void step(benchmark::State& state) {
  ty::tensor<float> images({batch, 28, 28, 1});
  fill_uniform(images, 0, 1);
  ty::tensor<std::int32_t> labels({batch});
  std::mt19937 rng(7);
  for (auto& l : labels)
    l = static_cast<std::int32_t>(rng() % 10);

  ty::session s(bench_options());
  s.initialize(mnist::train_op);
  const auto run = [&] {
    const auto feeds = [&](auto... fetches) {
      return s.run(ty::fetch(fetches...), ty::feed(mnist::images, images),
                   ty::feed(mnist::labels, labels));
    };
    if constexpr (Train)
      return feeds(mnist::total_loss, mnist::train_op);
    else
      return feeds(mnist::total_loss);
  };
  if (!std::isfinite(std::get<0>(run()).item()))
    return state.SkipWithError("the loss is not finite");
  for (auto _ : state)
    benchmark::DoNotOptimize(run());
  state.SetItemsProcessed(state.iterations() * batch);
}

// Real time: the work runs on several threads.
BENCHMARK(step<true>)->Name("typeflow_train_step")->UseRealTime();
BENCHMARK(step<false>)->Name("typeflow_forward")->UseRealTime();

} // namespace
