// The main job: the seed's model (model.hpp) trained on Fashion-MNIST, or any directory of
// MNIST-format files, logging as the TensorFlow tutorial did:
//   <date time>: step N, loss = X.XX (N.N examples/sec; N.NNN sec/batch)
// with the test accuracy at each epoch's end and a summary line at the end.
//
// --placement picks the session's placement policy: cpu (everything on cpu<0>), gpu (everything
// on gpu<0>, variables included) or variables-on-cpu (the seed's device function: variables on
// cpu<0>, compute on gpu<0>). The GPU policies exist in the CUDA build of this file
// (examples/mnist/main.cu, target mnist_cuda, which defines TYPEFLOW_MNIST_CUDA).
// --replicas 2 trains two towers, each on half of every batch, with the gradients averaged and
// one update per step: on cpu<0> and cpu<1> (threads) with --placement cpu, or the seed's
// multi-GPU training on gpu<0> and gpu<1> (variables on cpu<0>, NCCL) with --placement
// variables-on-cpu in the CUDA build.
// Its MPI build (main_mpi.cpp, target mnist_mpi) runs one tower per rank under mpirun: every
// rank draws the same batches and trains on its share, rank 0 logs and writes checkpoints.
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <optional>
#include <string>

#include "data.hpp"
#include "flags.hpp"
#include "model.hpp"
#include "typeflow/io/batch.hpp"
#include "typeflow/io/checkpoint.hpp"
#include "typeflow/io/graph_dot.hpp"
#include "typeflow/io/idx.hpp"
#include "typeflow/io/trace.hpp"

#ifndef TYPEFLOW_MNIST_CUDA // (float16 products are the CPU's: the g++ build trains them)
namespace mnist {
/// The seed's step under dynamic loss scaling (--precision float16): what keeps gradients under
/// float16's smallest subnormal from vanishing in its products.
inline constexpr auto scaled_train_op = ty::loss_scaled(optimizer).minimize(total_loss);
/// The scale variable, from the wrapper itself (find_variable would walk the whole graph again).
inline constexpr auto loss_scale = decltype(ty::loss_scaled(optimizer))::scale;
} // namespace mnist
#endif

namespace {

using mnist::flags;

/// The time as Python's str(datetime.now()) writes it: YYYY-MM-DD HH:MM:SS.ffffff
std::string now_string() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
      1000000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  const std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%06lld", static_cast<long long>(us));
  return buf;
}

template <class Session>
double test_accuracy(Session& s, const typeflow::data::mnist_split& test) {
  namespace ty = typeflow;
  const std::int64_t chunk = 1000, pixels = test.rows * test.cols;
  std::int64_t correct = 0;
  for (std::int64_t b = 0; b < test.count; b += chunk) {
    const std::int64_t n = std::min(chunk, test.count - b);
    auto [pred] =
        s.run(ty::fetch(mnist::predictions),
              ty::feed(mnist::images, ty::tensor_view<float>(test.images.data() + b * pixels,
                                                             {n, test.rows, test.cols, 1})));
    for (std::int64_t i = 0; i < n; ++i)
      correct += pred[i] == test.labels[static_cast<std::size_t>(b + i)];
  }
  return static_cast<double>(correct) / static_cast<double>(test.count);
}

/// Writes the trace (--trace) and prints the profile (--profile) of the recorded steps.
void report_trace(const flags& f, const typeflow::trace_recorder& rec, int threads) {
  namespace ty = typeflow;
  if (!f.trace.empty()) {
    ty::save_chrome_trace(rec, f.trace);
    std::printf("%s: trace of %llu steps written to %s\n", now_string().c_str(),
                static_cast<unsigned long long>(rec.runs_recorded()), f.trace.c_str());
  }
  if (f.profile)
    std::printf("%s: %s", now_string().c_str(),
                ty::make_profile(rec, ty::measure_roofline(threads)).str().c_str());
}

template <class Session>
int rank_of(const Session& s) {
  if constexpr (requires { s.rank(); })
    return s.rank();
  else
    return 0;
}
template <class Session>
int ranks_of(const Session& s) {
  if constexpr (requires { s.ranks(); })
    return s.ranks();
  else
    return 1;
}

/// The placement a picture shows: the policy's own, or a replicated run's first tower.
template <class Placement>
struct picture_placement {
  using type = Placement;
};
template <class Reducer, template <class> class Tower, class D0, class... D>
struct picture_placement<typeflow::replicate_policy<Reducer, Tower, D0, D...>> {
  using type = Tower<D0>;
};

/// The seed's tower: variables on cpu<0>, compute on D.
template <class D>
using seed_tower = typeflow::variables_on<typeflow::cpu<0>, typeflow::compute_on<D>>;

/// Trains with every node placed by Placement, by the training op Train (mnist::train_op, or
/// mnist::scaled_train_op under loss scaling).
template <class Placement, class Train = std::remove_const_t<decltype(mnist::train_op)>>
int run_training(const flags& f) {
  constexpr Train train_op{};
  namespace ty = typeflow;
  // First: the CPU and what each engine makes of it (and a warning for a generic fallback).
  std::printf("%s: %s\n", now_string().c_str(), ty::describe_machine().str().c_str());
  // The data (data.cpp): the test split, and the training batches from IDX or TFRecord files.
  mnist::training_data data(f);
  const ty::data::mnist_split& test = data.test();
  const std::int64_t train_count = data.train_count();
  std::printf("%s: data: %lld training and %lld test images from %s (%s)\n", now_string().c_str(),
              static_cast<long long>(train_count), static_cast<long long>(test.count),
              f.data_dir.c_str(), f.data_format.c_str());

  if (!f.graph.empty()) {
    using Pictured = typename picture_placement<Placement>::type;
    ty::save_graph(ty::to_dot<Pictured>(ty::fetch(mnist::total_loss, train_op),
                                        ty::dot_options{.collapse_regions = f.graph_collapse}),
                   f.graph);
    std::printf("%s: the training graph%s written to %s\n", now_string().c_str(),
                std::is_same_v<Pictured, Placement> ? "" : " (tower 0)", f.graph.c_str());
  }
  // Steps trace_first .. trace_first + trace_steps - 1 are recorded for --trace and --profile.
  std::optional<ty::trace_recorder> recorder;
  if (!f.trace.empty() || f.profile) {
    recorder.emplace();
    recorder->pause();
  }
  ty::session<Placement> s(
      ty::session_options{.threads = f.threads,
                          .seed = f.seed,
                          .trace = recorder ? &*recorder : nullptr,
                          .log_device_placement = f.log_device_placement,
                          .precision = f.precision == "bfloat16"  ? ty::precision::bfloat16
                                       : f.precision == "float16" ? ty::precision::float16
                                                                  : ty::precision::float32});
  s.initialize(train_op);
  if (rank_of(s) != 0 && !std::freopen("/dev/null", "w", stdout)) // rank 0 logs
    throw ty::error("mnist: cannot silence rank " + std::to_string(rank_of(s)));
  std::printf("%s: session: %d threads, placement %s, %d replica%s, %s products in %s\n",
              now_string().c_str(), s.threads(), f.placement.c_str(), f.replicas,
              f.replicas == 1 ? "" : "s", f.placement == "cpu" ? "CPU" : "GPU",
              f.placement != "cpu" && f.precision == "bfloat16"
                  ? "bfloat16 (tensor cores, float32 accumulation)"
              : s.products_in_bfloat16()  ? "bfloat16 (float32 accumulation)"
              : s.products_in_float16()   ? "float16 (emulated, float32 accumulation; loss scaling)"
              : f.precision == "bfloat16" ? "float32 (no native bfloat16 on this CPU)"
              : f.precision == "float16"  ? "float32 (no oneDNN in this build; loss scaling)"
                                          : "float32");

  const std::filesystem::path ckpt =
      f.checkpoint_dir.empty() ? std::filesystem::path{}
                               : std::filesystem::path(f.checkpoint_dir) / "model.safetensors";
  if (!f.checkpoint_dir.empty())
    std::filesystem::create_directories(f.checkpoint_dir);
  std::int64_t step = 0;
  if (f.resume && std::filesystem::exists(ckpt)) {
    ty::restore_checkpoint(s, ckpt);
    step = s.read(ty::global_step)[0];
    std::printf("%s: resumed from %s at step %lld\n", now_string().c_str(), ckpt.c_str(),
                static_cast<long long>(step));
  }

  // The batches (data.hpp); data.epoch_of(s): the epoch step s belongs to.
  const std::int64_t total_steps = data.total_steps();
  for (std::int64_t k = 0; k < step && k < total_steps; ++k)
    data.next(); // resume: skip the batches already trained on (the same order from IDX)

  const auto start = std::chrono::steady_clock::now();
  double accuracy = 0;
  float loss_value = 0;
  std::int64_t examples_seen = 0; // in this run (after a resume, not the skipped ones)
  while (step < total_steps) {
    const std::int64_t epoch = data.epoch_of(step);
    if (step == 0 || epoch != data.epoch_of(step - 1))
      s.write(
          mnist::learning_rate,
          static_cast<float>(f.learning_rate * std::pow(f.lr_decay, static_cast<double>(epoch))));
    auto b = data.next();
    // Under MPI every rank draws the same batches and feeds its share of each.
    const auto part = ty::batch_split::of(b.size, static_cast<std::size_t>(ranks_of(s)),
                                          static_cast<std::size_t>(rank_of(s)));
    const bool traced = recorder && step >= f.trace_first && step < f.trace_first + f.trace_steps;
    if (traced)
      recorder->resume();
    const auto t0 = std::chrono::steady_clock::now();
    auto [loss] =
        s.run(ty::fetch(mnist::total_loss, train_op),
              ty::feed(mnist::images, ty::tensor_view<float>(b.images.data() + part.begin * 28 * 28,
                                                             {part.rows, 28, 28, 1})),
              ty::feed(mnist::labels,
                       ty::tensor_view<std::int32_t>(b.labels.data() + part.begin, {part.rows})));
    const double duration =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (traced) {
      recorder->pause();
      if (step + 1 == f.trace_first + f.trace_steps || step + 1 == total_steps)
        report_trace(f, *recorder, s.threads());
    }
    loss_value = loss[0];
    examples_seen += b.size;
    if (!std::isfinite(loss_value))
      throw ty::error("mnist: model diverged with loss = " + std::to_string(loss_value) +
                      " at step " + std::to_string(step));
    if (step % f.log_every == 0)
      std::printf("%s: step %lld, loss = %.2f (%.1f examples/sec; %.3f sec/batch)\n",
                  now_string().c_str(), static_cast<long long>(step), loss_value,
                  static_cast<double>(b.size) / duration, duration);
    ++step;
    if (data.epoch_of(step) != epoch || step == total_steps) {
      accuracy = test_accuracy(s, test);
      std::printf("%s: epoch %lld done, step %lld, test accuracy = %.4f\n", now_string().c_str(),
                  static_cast<long long>(epoch + 1), static_cast<long long>(step), accuracy);
#ifndef TYPEFLOW_MNIST_CUDA
      if constexpr (std::is_same_v<Train, std::remove_const_t<decltype(mnist::scaled_train_op)>>)
        std::printf("%s: loss scale = %g\n", now_string().c_str(),
                    static_cast<double>(s.read(mnist::loss_scale)[0]));
#endif
      if (!ckpt.empty()) {
        ty::save_checkpoint(s, ckpt);
        std::printf("%s: checkpoint written to %s\n", now_string().c_str(), ckpt.c_str());
      }
    }
    std::fflush(stdout);
  }
  if (recorder && recorder->runs_recorded() == 0)
    std::fprintf(stderr,
                 "mnist: no step was traced: --trace-first %lld is past this run's last "
                 "step\n",
                 static_cast<long long>(f.trace_first));
  if (total_steps == 0 || accuracy == 0)
    accuracy = test_accuracy(s, test);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: done: %d epochs, %lld steps, final loss = %.3f, test accuracy = %.4f, "
              "%.1f s training (%.1f examples/sec)\n",
              now_string().c_str(), f.epochs, static_cast<long long>(step), loss_value, accuracy,
              wall, static_cast<double>(examples_seen) / wall);
  return 0;
}

} // namespace

int main(int argc, char** argv) try {
  namespace ty = typeflow;
#ifdef TYPEFLOW_MNIST_MPI
  ty::mpi::environment mpi(argc, argv);
  flags f;
  if (const auto exit_code = mnist::parse_flags(argc, argv, f))
    return *exit_code;
  if (f.placement != "cpu" || f.replicas != 1)
    throw ty::error("mnist_mpi: one CPU tower per rank (start more ranks with mpirun -np N)");
  return run_training<ty::mpi::replicate<ty::cpu<0>>>(f);
#else
  flags f;
  if (const auto exit_code = mnist::parse_flags(argc, argv, f))
    return *exit_code;
#ifndef TYPEFLOW_MNIST_CUDA // (the CUDA build leaves CPU towers and float16 to the g++ build)
  if (f.placement == "cpu" && f.replicas == 2)
    return run_training<ty::replicate<ty::cpu<0>, ty::cpu<1>>>(f);
  if (f.placement == "cpu" && f.precision == "float16")
    return run_training<ty::on<ty::cpu<0>>, std::remove_const_t<decltype(mnist::scaled_train_op)>>(
        f);
#else
  if (f.placement == "cpu" && f.replicas == 2)
    throw ty::error("mnist_cuda: CPU towers are in the g++ build (mnist --replicas 2)");
  if (f.precision == "float16")
    throw ty::error("mnist_cuda: float16 products are the CPU's, in the g++ build (mnist "
                    "--precision float16)");
#endif
  if (f.placement == "cpu")
    return run_training<ty::on<ty::cpu<0>>>(f);
#ifdef TYPEFLOW_MNIST_CUDA
  if (ty::cuda_backend::device_count() == 0)
    throw ty::error("--placement " + f.placement + ": no CUDA device on this machine");
  if (f.placement == "gpu")
    return run_training<ty::on<ty::gpu<0>>>(f);
  if (f.replicas == 2) {
    if (ty::cuda_backend::device_count() < 2)
      throw ty::error("--replicas 2 --placement variables-on-cpu: needs 2 CUDA devices, this "
                      "machine has " +
                      std::to_string(ty::cuda_backend::device_count()));
    return run_training<ty::replicate_with<seed_tower, ty::gpu<0>, ty::gpu<1>>>(f);
  }
  return run_training<ty::variables_on<ty::cpu<0>, ty::compute_on<ty::gpu<0>>>>(f);
#else
  throw ty::error("--placement " + f.placement +
                  " needs the CUDA build of this example (target mnist_cuda, built when CMake "
                  "finds nvcc)");
#endif
#endif
} catch (const std::exception& e) {
  std::fprintf(stderr, "mnist: %s\n", e.what());
  return 1;
}
