// Replication across processes and machines with MPI (Open MPI): every rank runs its towers on
// its own batches, and the towers' averaged gradients are combined across ranks into the
// batch-weighted mean before the one update. Launched with mpirun:
//
//   ty::mpi::environment mpi(argc, argv);               // MPI_Init_thread ... MPI_Finalize
//   ty::session<ty::mpi::replicate<ty::cpu<0>>> s;     // one tower per rank (or more)
//   s.run(ty::fetch(loss, train), ty::feed(x, my_shard), ...);
//
// Rank 0's initial variables are broadcast before the first run; save_checkpoint writes on
// rank 0 only. Small gradients are packed into buckets of session_options::fusion_bytes per
// all-reduce (Horovod's tensor fusion); with session_options::deterministic the buckets are
// all-gathered and summed in rank order, so two runs give identical bits. A collective that
// does not complete within session_options::collective_timeout seconds (a rank died or hangs)
// throws typeflow::error, and the environment then aborts the job instead of waiting forever.
#pragma once
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1 // the C API only (the deprecated C++ bindings warn under -Wextra)
#endif
#include <mpi.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../runtime/replicate.hpp"

namespace typeflow::mpi {

/// Checks an MPI call (the default handler is replaced by MPI_ERRORS_RETURN).
inline void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS)
    return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw error(std::string("MPI call failed: ") + call + ": " + std::string(text, len));
}
#define TYPEFLOW_MPI_CHECK(call) ::typeflow::mpi::check((call), #call)

namespace detail {
inline bool& failed() {
  static bool f = false;
  return f;
}
} // namespace detail

/// MPI for the lifetime of this object (one per process, before any MPI session).
class environment {
public:
  environment(int& argc, char**& argv) {
    int provided = 0;
    TYPEFLOW_MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  ~environment() {
    // After a failed collective the other ranks may never arrive: abort rather than hang in
    // MPI_Finalize.
    if (detail::failed())
      MPI_Abort(MPI_COMM_WORLD, 1);
    else
      MPI_Finalize();
  }
  environment(const environment&) = delete;
  environment& operator=(const environment&) = delete;
  static int rank() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
  }
  static int size() {
    int n = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
  }
};

/// Combines the towers' averages across the ranks of MPI_COMM_WORLD.
class mpi_reducer {
public:
  static constexpr bool distributed = true;
  mpi_reducer() {
    int init = 0;
    MPI_Initialized(&init);
    if (!init)
      throw error("mpi::replicate: MPI is not initialized (construct a typeflow::mpi::environment "
                  "first)");
    rank_ = environment::rank();
    size_ = environment::size();
  }
  int rank() const { return rank_; }
  int size() const { return size_; }

  /// Each buffer holds this rank's mean over `rows` rows; afterwards, the mean over every rank's
  /// rows: sum(rows_r * mean_r) / sum(rows_r), bucket by bucket.
  void reduce(std::vector<replica_buffer>& bufs, std::int64_t rows, const session_options& o) {
    double total = static_cast<double>(rows);
    allreduce_sum(&total, 1, o);
    if (total <= 0)
      return;
    const std::size_t bucket_elems = std::max<std::size_t>(1, o.fusion_bytes / sizeof(double));
    std::vector<double> bucket;
    bucket.reserve(bucket_elems);
    // Buffers packed in order; a bucket is sent when full (a large buffer spans several).
    std::size_t b = 0;
    std::int64_t e = 0;
    while (b < bufs.size()) {
      bucket.clear();
      struct piece {
        std::size_t buf;
        std::int64_t from, count;
      };
      std::vector<piece> pieces;
      while (b < bufs.size() && bucket.size() < bucket_elems) {
        const std::int64_t take = std::min<std::int64_t>(
            bufs[b].count - e, static_cast<std::int64_t>(bucket_elems - bucket.size()));
        for (std::int64_t i = 0; i < take; ++i)
          bucket.push_back(static_cast<double>(rows) * load(bufs[b], e + i));
        pieces.push_back({b, e, take});
        e += take;
        if (e == bufs[b].count) {
          ++b;
          e = 0;
        }
      }
      allreduce_sum(bucket.data(), bucket.size(), o);
      std::size_t at = 0;
      for (const auto& p : pieces)
        for (std::int64_t i = 0; i < p.count; ++i)
          store(bufs[p.buf], p.from + i, bucket[at++] / total);
      ++buckets_;
    }
  }

  /// Rank 0's value of every variable, to every rank, each broadcast bounded by the collective
  /// timeout (a rank that never arrives fails the job instead of hanging it).
  void broadcast(backend::variable_store& vars, const session_options& o) {
    for (auto& [name, rec] : vars) {
      std::uint64_t check[2] = {std::hash<std::string>{}(name), rec.bytes}, root[2] = {};
      std::memcpy(root, check, sizeof check);
      MPI_Request req;
      TYPEFLOW_MPI_CHECK(MPI_Ibcast(root, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD, &req));
      wait(req, o, "the initial variable broadcast (MPI_Ibcast)");
      if (root[0] != check[0] || root[1] != check[1])
        throw error("mpi::replicate: rank " + std::to_string(rank_) + " holds variable \"" + name +
                    "\" where rank 0 holds another (every rank must run the same model)");
      // MPI counts are ints: a variable over 2 GiB goes in pieces.
      auto* bytes = static_cast<unsigned char*>(rec.data.get());
      constexpr std::size_t piece = std::size_t{1} << 30;
      for (std::size_t at = 0; at < rec.bytes; at += piece) {
        const auto n = static_cast<int>(std::min(piece, rec.bytes - at));
        TYPEFLOW_MPI_CHECK(MPI_Ibcast(bytes + at, n, MPI_BYTE, 0, MPI_COMM_WORLD, &req));
        wait(req, o, "the initial variable broadcast (MPI_Ibcast)");
      }
      rec.device_valid = false;
    }
  }
  /// All-reduces sent so far (for tests of the bucketing).
  std::size_t buckets() const { return buckets_; }

private:
  static double load(const replica_buffer& b, std::int64_t i) {
    return b.is_double ? static_cast<const double*>(b.data)[i]
                       : static_cast<double>(static_cast<const float*>(b.data)[i]);
  }
  static void store(const replica_buffer& b, std::int64_t i, double v) {
    if (b.is_double)
      static_cast<double*>(b.data)[i] = v;
    else
      static_cast<float*>(b.data)[i] = static_cast<float>(v);
  }

  /// Waits for a request, failing after the timeout instead of hanging on a dead rank.
  void wait(MPI_Request& req, const session_options& o, const char* what) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(o.collective_timeout);
    int done = 0;
    while (true) {
      TYPEFLOW_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
      if (done)
        return;
      if (std::chrono::steady_clock::now() > deadline) {
        detail::failed() = true;
        throw error(std::string("mpi::replicate: ") + what + " on rank " + std::to_string(rank_) +
                    " did not complete within " + std::to_string(o.collective_timeout) +
                    " s: another rank died or hangs");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void allreduce_sum(double* data, std::size_t n, const session_options& o) {
    MPI_Request req;
    if (!o.deterministic) {
      TYPEFLOW_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_DOUBLE,
                                        MPI_SUM, MPI_COMM_WORLD, &req));
      wait(req, o, "MPI_Iallreduce");
      return;
    }
    // Deterministic: every rank sums the same values in rank order.
    std::vector<double> all(n * static_cast<std::size_t>(size_));
    TYPEFLOW_MPI_CHECK(MPI_Iallgather(data, static_cast<int>(n), MPI_DOUBLE, all.data(),
                                      static_cast<int>(n), MPI_DOUBLE, MPI_COMM_WORLD, &req));
    wait(req, o, "MPI_Iallgather");
    for (std::size_t i = 0; i < n; ++i) {
      double s = 0;
      for (int r = 0; r < size_; ++r)
        s += all[static_cast<std::size_t>(r) * n + i];
      data[i] = s;
    }
  }

  int rank_ = 0, size_ = 1;
  std::size_t buckets_ = 0;
};

/// `mpi::replicate<D...>`: towers D... in every rank, combined across ranks by MPI.
template <class... D>
using replicate = replicate_policy<mpi_reducer, typeflow::detail::on_device, D...>;
template <template <class> class Tower, class... D>
using replicate_with = replicate_policy<mpi_reducer, Tower, D...>;

} // namespace typeflow::mpi
