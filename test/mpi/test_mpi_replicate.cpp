// Replication across processes, run by CTest as `mpiexec -n 2 --oversubscribe test_mpi_replicate`:
// each rank trains on its own shard of every global batch (uneven: 7 and 6 rows of 13), with two
// towers per rank; the variables must equal those of one session trained on the whole batches.
// Also: rank 0's initial variables reach every rank (the ranks seed differently), the
// deterministic mode gives identical bits on a second run, small fusion buckets give the same
// result as one bucket, and save_checkpoint writes on rank 0 only.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <thread>

#include "typeflow/distributed/mpi.hpp"
#include "typeflow/typeflow.hpp"

namespace ty = typeflow;
using i64 = std::int64_t;

namespace {

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 6>>;
constexpr auto y = ty::placeholder<"y", std::int32_t, ty::shape<ty::dyn>>;
constexpr auto h = ty::tanh(ty::dense<"l1", 8, ty::uniform<-0.5, 0.5>, ty::fill<0.05>>(x));
constexpr auto logits = ty::dense<"l2", 4, ty::uniform<-0.5, 0.5>>(h);
constexpr auto loss = ty::mean(ty::sparse_softmax_cross_entropy_with_logits(logits, y));
constexpr auto train =
    ty::momentum(ty::constant<0.2>, ty::constant<0.9>, ty::nesterov).minimize(loss);
constexpr auto w1 = ty::find_variable<"l1/weights">(loss);

constexpr i64 global_rows = 13, steps = 4;

void make_batch(i64 step, i64 from, i64 rows, ty::tensor<float>& xv, ty::tensor<std::int32_t>& yv) {
  xv = ty::tensor<float>({rows, 6});
  yv = ty::tensor<std::int32_t>({rows});
  for (i64 r = 0; r < rows; ++r) {
    for (i64 c = 0; c < 6; ++c)
      xv[r * 6 + c] = static_cast<float>(
          std::sin(0.31 * static_cast<double>((from + r) * 6 + c) + static_cast<double>(step)));
    yv[r] = static_cast<std::int32_t>(((from + r) * 3 + step) % 4);
  }
}

template <class S>
ty::tensor<float> train_shard(S& s, int rank) {
  const i64 from = rank == 0 ? 0 : 7, rows = rank == 0 ? 7 : 6;
  for (i64 step = 0; step < steps; ++step) {
    ty::tensor<float> xv;
    ty::tensor<std::int32_t> yv;
    make_batch(step, from, rows, xv, yv);
    s.run(ty::fetch(train), ty::feed(x, xv), ty::feed(y, yv));
  }
  return s.read(w1);
}

int failures = 0;
void expect(bool ok, const char* what, int rank) {
  if (!ok) {
    std::printf("FAIL rank %d: %s\n", rank, what);
    ++failures;
  }
}

} // namespace

/// --die-after N DIR: both ranks train and rank 0 checkpoints to DIR after every step; rank 1
/// dies before step N. Rank 0 must stop within the collective timeout (3 s) with an error
/// naming the all-reduce, and the checkpoint must still hold step N.
int die_after(int rank, i64 n, const std::filesystem::path& dir) {
  using policy = ty::mpi::replicate<ty::cpu<0>>;
  ty::session<policy> s(ty::session_options{.threads = 1, .collective_timeout = 3});
  for (i64 step = 0;; ++step) {
    if (rank == 1 && step == n)
      std::_Exit(7); // no MPI_Finalize: a crash, as far as the others can tell
    ty::tensor<float> xv;
    ty::tensor<std::int32_t> yv;
    make_batch(step, rank == 0 ? 0 : 7, rank == 0 ? 7 : 6, xv, yv);
    s.run(ty::fetch(train), ty::feed(x, xv), ty::feed(y, yv));
    ty::save_checkpoint(s, dir / "model.safetensors");
  }
}

/// --hang-first: rank 0 hangs (sleeps far past the timeout) before its first run, so rank 1
/// waits in the initial variable broadcast from rank 0: it must stop within the collective
/// timeout (3 s) with an error naming the broadcast.
int hang_first(int rank) {
  using policy = ty::mpi::replicate<ty::cpu<0>>;
  ty::session<policy> s(ty::session_options{.threads = 1, .collective_timeout = 3});
  if (rank == 0)
    std::this_thread::sleep_for(std::chrono::seconds(600));
  ty::tensor<float> xv;
  ty::tensor<std::int32_t> yv;
  make_batch(0, 0, 7, xv, yv);
  s.run(ty::fetch(train), ty::feed(x, xv), ty::feed(y, yv));
  return 0;
}

/// --check FILE N: the checkpoint restores and holds global_step N.
int check_checkpoint(const std::filesystem::path& file, i64 n) {
  ty::session<> s;
  s.initialize(train);
  ty::restore_checkpoint(s, file);
  const i64 step = s.read(ty::global_step)[0];
  std::printf("%s: checkpoint at step %lld\n", step == n ? "ok" : "FAIL",
              static_cast<long long>(step));
  return step == n ? 0 : 1;
}

int main(int argc, char** argv) {
  ty::mpi::environment mpi(argc, argv);
  const int rank = mpi.rank();
  if (argc == 4 && std::string_view(argv[1]) == "--die-after") {
    try {
      return die_after(rank, std::atoi(argv[2]), argv[3]);
    } catch (const std::exception& e) {
      std::printf("rank %d stopped: %s\n", rank, e.what());
      std::fflush(stdout);
      return 1; // the environment aborts the job
    }
  }
  if (argc == 2 && std::string_view(argv[1]) == "--hang-first") {
    try {
      return hang_first(rank);
    } catch (const std::exception& e) {
      std::printf("rank %d stopped: %s\n", rank, e.what());
      std::fflush(stdout);
      return 1; // the environment aborts the job
    }
  }
  if (argc == 4 && std::string_view(argv[1]) == "--check") {
    try {
      return check_checkpoint(argv[2], std::atoi(argv[3]));
    } catch (const std::exception& e) {
      std::printf("FAIL: %s\n", e.what());
      return 1;
    }
  }
  if (mpi.size() != 2) {
    std::printf("FAIL: run with 2 ranks (got %d)\n", mpi.size());
    return 1;
  }
  try {
    // The reference: one session, whole batches.
    ty::session<> one(ty::session_options{.threads = 1, .seed = 0});
    for (i64 step = 0; step < steps; ++step) {
      ty::tensor<float> xv;
      ty::tensor<std::int32_t> yv;
      make_batch(step, 0, global_rows, xv, yv);
      one.run(ty::fetch(train), ty::feed(x, xv), ty::feed(y, yv));
    }
    const auto ref = one.read(w1);

    using policy = ty::mpi::replicate<ty::cpu<0>, ty::cpu<1>>;
    // Seeds differ per rank: the broadcast must make rank 1 start from rank 0's values.
    ty::session<policy> a(
        ty::session_options{.threads = 2, .seed = static_cast<std::uint64_t>(rank)});
    expect(a.rank() == rank && a.ranks() == 2, "rank and size", rank);
    const auto wa = train_shard(a, rank);
    double worst = 0;
    for (i64 i = 0; i < ref.size(); ++i)
      worst = std::max(worst, std::abs(static_cast<double>(wa[i]) - ref[i]) /
                                  (1 + std::abs(static_cast<double>(ref[i]))));
    std::printf("rank %d: worst relative difference to one session: %.3g\n", rank, worst);
    expect(worst <= 1e-5, "2 ranks x 2 towers differ from one session", rank);
    expect(a.read(ty::global_step)[0] == steps, "global_step", rank);

    // Deterministic mode, tiny buckets (a bucket of 16 doubles: many all-gathers): two runs,
    // identical bits, and the same result as above within rounding.
    auto det = [&] {
      ty::session<policy> s(
          ty::session_options{.threads = 2, .seed = 0, .fusion_bytes = 128, .deterministic = true});
      return train_shard(s, rank);
    };
    const auto d1 = det(), d2 = det();
    expect(std::memcmp(d1.data(), d2.data(), sizeof(float) * static_cast<std::size_t>(d1.size())) ==
               0,
           "deterministic runs differ", rank);
    for (i64 i = 0; i < d1.size(); ++i)
      if (std::abs(d1[i] - wa[i]) > 1e-5f * (1 + std::abs(wa[i]))) {
        expect(false, "bucketed deterministic result differs", rank);
        break;
      }

    // Checkpoints: rank 0 writes, rank 1 does not.
    const auto dir = std::filesystem::temp_directory_path() / "typeflow-mpi-test";
    std::filesystem::create_directories(dir);
    const auto file = dir / ("rank" + std::to_string(rank) + ".safetensors");
    std::filesystem::remove(file);
    ty::save_checkpoint(a, file);
    expect(std::filesystem::exists(file) == (rank == 0), "only rank 0 writes checkpoints", rank);
    std::filesystem::remove(file);
  } catch (const std::exception& e) {
    std::printf("FAIL rank %d: %s\n", rank, e.what());
    ++failures;
  }
  int all = failures;
  MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("%s: %d failures over 2 ranks\n", all ? "FAIL" : "ok", all);
  return all ? 1 : 0;
}
