// A persistent fork-join thread pool: parallel_for splits [0, n) into tasks that the caller and
// the workers take from one atomic counter. An idle worker, and a caller waiting for the last
// chunks, spin for up to 200 microseconds before sleeping on a condition variable: a step of a
// graph is often a fraction of a millisecond, the gaps between parallel steps (a loop's serial
// bookkeeping, a single-threaded call) are often longer than a few tens of microseconds, and a
// futex sleep and wake-up per gap would be a large part of them (bench/README.md, *The pool
// spins longer*; OpenBLAS's own threads spin the same way, which is why the session keeps BLAS
// on one thread and runs it on this pool).
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "../../core/compiled.hpp"

namespace typeflow::cpu_backend {

/// A non-owning reference to a callable taking (begin, end): what parallel_for runs. It holds
/// two pointers and costs one indirect call, like std::function's call, but no allocation for a
/// lambda capturing more than two pointers and no type-erased manager per lambda (std::function's
/// code for copying and destroying its target, compiled for every kernel's lambda: about 120 of
/// them in examples/mnist/main.cpp). C++26 has std::function_ref; C++20 has nothing of the kind.
/// The callable must outlive the call, as it does when passed to parallel_for.
class range_fn {
public:
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, range_fn> &&
           std::invocable<std::remove_reference_t<F>&, std::int64_t, std::int64_t>) range_fn(F&& f)
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, std::int64_t b, std::int64_t e) {
          (*static_cast<std::remove_reference_t<F>*>(o))(b, e);
        }) {}
  void operator()(std::int64_t b, std::int64_t e) const { call_(obj_, b, e); }

private:
  void* obj_;
  void (*call_)(void*, std::int64_t, std::int64_t);
};

class thread_pool {
public:
  /// threads <= 0: all hardware threads.
  explicit thread_pool(int threads = 0);
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;
  ~thread_pool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_)
      t.join();
  }

  int size() const { return n_; }

  /// Calls fn(begin, end) on disjoint chunks covering [0, n), each at least `grain` long
  /// (except the last). Runs inline when there is one chunk, one thread, or when nested.
  void parallel_for(std::int64_t n, std::int64_t grain, range_fn fn);

private:
  struct job {
    const range_fn* fn = nullptr;
    std::int64_t n = 0, chunks = 0;
    std::atomic<std::int64_t> next{0}, finished{0};
    std::exception_ptr error;
    std::mutex error_mu;
  };

  void run_chunks(job& j);

  /// Busy-waits (with a pause) until done() or about 200 microseconds have passed.
  template <class Done>
  static void spin_until(Done done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
    for (int i = 0; !done(); ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > until)
        return;
    }
  }

  void work_loop();

  int n_ = 1;
  std::vector<std::thread> workers_;
  std::mutex mu_, run_mu_;
  std::condition_variable cv_, done_cv_;
  job* job_ = nullptr;
  // Written under mu_, atomic so that a spinning worker may read them without it.
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> active_{0}; // workers inside run_chunks; changed under mu_
  std::atomic<bool> stop_{false};
  static inline thread_local bool in_parallel_ = false;
};

#if TYPEFLOW_BODIES
TYPEFLOW_DECL thread_pool::thread_pool(int threads) {
  int n = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  n_ = std::max(1, n);
  for (int i = 1; i < n_; ++i)
    workers_.emplace_back([this] { work_loop(); });
}
#endif

#if TYPEFLOW_BODIES
TYPEFLOW_DECL void thread_pool::parallel_for(std::int64_t n, std::int64_t grain, range_fn fn) {
  if (n <= 0)
    return;
  grain = std::max<std::int64_t>(1, grain);
  const std::int64_t max_chunks = (n + grain - 1) / grain;
  const std::int64_t chunks = std::min<std::int64_t>(max_chunks, std::int64_t{n_} * 4);
  if (chunks <= 1 || n_ == 1 || in_parallel_) {
    fn(0, n);
    return;
  }
  std::unique_lock run_lock(run_mu_);
  job j;
  j.fn = &fn;
  j.n = n;
  j.chunks = chunks;
  {
    std::lock_guard lock(mu_);
    job_ = &j;
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  run_chunks(j);
  // Done when every chunk is and no worker is still inside run_chunks (it may yet read j). The
  // spin waits for both: a worker that ran the last chunk leaves a moment after counting it, and
  // a caller that went to sleep in that moment paid a futex wait and wake-up per call.
  const auto done = [&] {
    return j.finished.load(std::memory_order_acquire) == chunks &&
           active_.load(std::memory_order_acquire) == 0;
  };
  spin_until(done);
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, done);
  job_ = nullptr;
  if (j.error)
    std::rethrow_exception(j.error);
}
#endif

#if TYPEFLOW_BODIES
TYPEFLOW_DECL void thread_pool::run_chunks(job& j) {
  in_parallel_ = true;
  for (;;) {
    const std::int64_t c = j.next.fetch_add(1);
    if (c >= j.chunks)
      break;
    const std::int64_t b = j.n * c / j.chunks, e = j.n * (c + 1) / j.chunks;
    try {
      (*j.fn)(b, e);
    } catch (...) {
      std::lock_guard lock(j.error_mu);
      if (!j.error)
        j.error = std::current_exception();
    }
    j.finished.fetch_add(1);
  }
  in_parallel_ = false;
}
#endif

#if TYPEFLOW_BODIES
TYPEFLOW_DECL void thread_pool::work_loop() {
  std::uint64_t seen = 0;
  for (;;) {
    job* j;
    spin_until([&] {
      return stop_.load(std::memory_order_relaxed) ||
             generation_.load(std::memory_order_acquire) != seen;
    });
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || (job_ && generation_ != seen); });
      if (stop_)
        return;
      seen = generation_;
      j = job_;
      ++active_;
    }
    run_chunks(*j);
    {
      std::lock_guard lock(mu_);
      --active_;
    }
    done_cv_.notify_all();
  }
}
#endif

} // namespace typeflow::cpu_backend
