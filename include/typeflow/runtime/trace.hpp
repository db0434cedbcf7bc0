// A step trace: what a traced run executed, where, when and at what cost.
//
// `session_options{.trace = &recorder}` makes every run of the session (and of each tower of a
// replicated one) record its steps, transfers and all-reduces into `recorder`, which keeps the
// runs it is asked to keep (`trace_recorder::options`). An event holds numbers only (node index,
// device, times, bytes, FLOPs) and a pointer to its plan's names, so recording costs two clock
// reads and a push per step; io/trace.hpp writes Chrome trace-event JSON and the per-op profile.
// With no recorder nothing is timed: the executor tests one pointer per step.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../backend/cpu/simd.hpp"
#include "../compile/plan.hpp"
#include "../core/compiled.hpp"
#include "../device/device.hpp"

namespace typeflow {

/// The names a trace needs from one plan, built once per plan type the first time it is traced.
struct trace_plan {
  std::vector<std::string> label;  ///< node i: `conv2d(%3, conv1/weights, ...)`
  std::vector<std::string> kernel; ///< what step i runs: "conv2d", "fused(mul,add)", ...
  std::vector<std::string> kind;   ///< what the profile groups step i under ("fused elementwise")
};

namespace detail {
/// The names of a plan's steps for traces (see trace_plan). Strings are built by appending only:
/// g++ 12 warns falsely (-Wrestrict, bug 105329) on `"literal" + std::string` at -O2.
TYPEFLOW_DECL_DEFERRED trace_plan make_trace_plan(const compile::plan_view& v)
#if TYPEFLOW_BODIES
{
  trace_plan t;
  auto members = [&](std::size_t r) {
    std::string m;
    for (std::size_t k = v.member_begin[r]; k < v.member_begin[r + 1]; ++k) {
      if (!m.empty())
        m += ',';
      m += v.op[v.members[k]];
    }
    return m;
  };
  for (std::size_t i = 0; i < v.size; ++i) {
    std::string label = "%";
    label += std::to_string(i);
    label += " = ";
    label += v.label(i);
    t.label.push_back(std::move(label));
    std::string op(v.op[i]), kind = op;
    switch (v.step[i]) {
    case graph::step_kind::kernel:
      if (v.elementwise[i]) {
        if (v.member_begin[i + 1] - v.member_begin[i] > 1) {
          op = "fused(";
          op += members(i);
          op += ')';
        }
        kind = "elementwise";
      }
      break;
    case graph::step_kind::epilogue:
      op = v.op[v.producer[i]];
      op += "+bias_add";
      if (v.relu[i])
        op += "+relu";
      kind = op;
      break;
    case graph::step_kind::prologue:
      kind += "(fused input)";
      op += "(fused(";
      op += members(v.source[i]);
      op += "))";
      break;
    case graph::step_kind::chained:
      op = v.op[v.producer[i]];
      op += "+fused(";
      op += members(i);
      op += ')';
      kind = v.op[v.producer[i]];
      kind += "+elementwise";
      break;
    case graph::step_kind::constant:
      op = kind = "fill";
      break;
    default:
      break;
    }
    t.kernel.push_back(std::move(op));
    t.kind.push_back(std::move(kind));
  }
  return t;
}
#else
    ;
#endif

/// Held while a session writes its placement log (sessions on several threads, a replicated
/// session's towers among them, may write into one stream).
inline std::mutex& placement_log_mutex() {
  static std::mutex m;
  return m;
}

/// TensorFlow's log_device_placement lines for a plan: `%7 conv2d(%3, conv1/weights): (conv2d):
/// /job:localhost/replica:0/task:0/device:CPU:0`, and each transfer's send and receive. A node
/// is named by `own[node]` where given (a CPU tower running tower 0's plan names its own plan's
/// devices, which differ from tower 0's only in which CPU).
TYPEFLOW_DECL_DEFERRED std::string placement_log(const compile::plan_view& v,
                                                 const device_id* own = nullptr)
#if TYPEFLOW_BODIES
{
  const auto node_device = [&](std::size_t i) { return (own ? own[i] : v.device[i]).name(); };
  std::string out;
  for (std::size_t i = 0; i < v.size; ++i) {
    const std::string node = std::to_string(i);
    out += '%';
    out += node;
    out += ' ';
    out += v.label(i);
    out += ": (";
    out += v.op[i];
    out += "): ";
    out += node_device(i);
    out += '\n';
    for (std::size_t q = v.source_begin[i]; q < v.source_begin[i + 1]; ++q) {
      out += '%';
      out += node;
      out += "/send: (send): ";
      out += node_device(i);
      out += "\n%";
      out += node;
      out += "/recv: (recv): ";
      out += v.transfer_device[v.by_source[q]].name();
      out += '\n';
    }
  }
  return out;
}
#else
    ;
#endif
} // namespace detail

/// One recorded event.
struct trace_event {
  enum class type : std::uint8_t {
    step,       ///< a kernel (or a fused region, an epilogue, a prologue)
    transfer,   ///< a tensor sent to another device (`device`: the destination)
    all_reduce, ///< the towers' gradients averaged (in process, NCCL or MPI)
    run,        ///< a whole session::run
  };
  type what = type::step;
  const trace_plan* plan = nullptr; ///< the names of step and transfer events' nodes
  std::uint32_t node = 0;           ///< the step's node; a transfer's source node
  device_id device{};               ///< where it ran
  std::uint32_t thread = 0;         ///< the host thread that ran it (0, 1, ... by first use)
  std::uint64_t run = 0;            ///< the recorder's number of the run
  double start = 0;                 ///< seconds since the recorder was made
  double duration = 0;              ///< seconds
  std::uint64_t bytes = 0;          ///< bytes read and written (a transfer: copied)
  double flops = -1;                ///< floating-point operations where known, else -1
};

/// Collects the events of chosen runs; shared by every session that names it, thread-safe.
class trace_recorder {
public:
  struct options {
    std::uint64_t skip = 0; ///< runs to let pass before recording (warm-up)
    std::uint64_t runs = std::numeric_limits<std::uint64_t>::max(); ///< runs to record
  };
  trace_recorder() : trace_recorder(options{}) {}
  explicit trace_recorder(options o) : opts_(o), epoch_(clock::now()) {}
  trace_recorder(const trace_recorder&) = delete;
  trace_recorder& operator=(const trace_recorder&) = delete;

  /// Called as a run starts: its number when this run is recorded, else nothing.
  std::optional<std::uint64_t> begin_run() {
    std::lock_guard lock(mu_);
    const std::uint64_t n = seen_++;
    if (paused_ || n < opts_.skip || n - opts_.skip >= opts_.runs)
      return std::nullopt;
    ++recorded_;
    return n;
  }
  /// Stops and resumes recording (runs that start while paused are not recorded).
  void pause() {
    std::lock_guard lock(mu_);
    paused_ = true;
  }
  void resume() {
    std::lock_guard lock(mu_);
    paused_ = false;
  }
  /// Moves `events` in (and leaves it empty).
  void add(std::vector<trace_event>& events) {
    std::lock_guard lock(mu_);
    events_.insert(events_.end(), events.begin(), events.end());
    events.clear();
  }
  /// The events so far, in the order the runs handed them in.
  std::vector<trace_event> events() const {
    std::lock_guard lock(mu_);
    return events_;
  }
  /// Runs started with this recorder, and runs recorded.
  std::uint64_t runs_seen() const {
    std::lock_guard lock(mu_);
    return seen_;
  }
  std::uint64_t runs_recorded() const {
    std::lock_guard lock(mu_);
    return recorded_;
  }
  /// Forgets the events (the run counts stay).
  void clear() {
    std::lock_guard lock(mu_);
    events_.clear();
  }

  /// Seconds since the recorder was made.
  double now() const { return std::chrono::duration<double>(clock::now() - epoch_).count(); }
  /// A small number for the calling thread (0, 1, ... in order of first use, process-wide).
  static std::uint32_t thread_index() {
    static std::atomic<std::uint32_t> next{0};
    thread_local const std::uint32_t mine = next++;
    return mine;
  }

private:
  using clock = std::chrono::steady_clock;
  options opts_;
  clock::time_point epoch_;
  mutable std::mutex mu_;
  std::vector<trace_event> events_;
  std::uint64_t seen_ = 0, recorded_ = 0;
  bool paused_ = false;
};

/// The machine's roofs, measured: memory bandwidth (a copy of buffers far larger than the
/// caches, bytes read plus bytes written) and float32 FMA throughput (independent vector FMAs,
/// two FLOPs each, at the fused loops' vector width), both on `threads` threads. The profile
/// of a traced run (io/trace.hpp) sets each op's GB/s and GFLOP/s against them.
struct roofline {
  int threads = 1;
  double bandwidth = 0; ///< bytes per second
  double flops = 0;     ///< float32 FLOPs per second
  std::string str() const {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "roofline: %.1f GB/s memory (copy), %.1f GFLOP/s float32 FMA, "
                  "%d thread%s",
                  bandwidth / 1e9, flops / 1e9, threads, threads == 1 ? "" : "s");
    return buf;
  }
};

namespace detail {
/// FLOPs one thread does in `reps` rounds of 12 independent FMA chains (kept live by the sum).
inline double fma_chains(std::size_t reps, float& sink) {
#if defined(TYPEFLOW_HAS_XSIMD)
  using V = cpu_backend::simd::vec<float>;
  constexpr std::size_t lanes = V::size;
#else
  using V = float;
  constexpr std::size_t lanes = 1;
#endif
  V acc[12];
  for (std::size_t k = 0; k < 12; ++k)
    acc[k] = V(1.0f + 1e-3f * static_cast<float>(k));
  const V a(0.999999f), b(1e-7f);
  for (std::size_t r = 0; r < reps; ++r)
    for (std::size_t k = 0; k < 12; ++k) {
#if defined(TYPEFLOW_HAS_XSIMD)
      acc[k] = xsimd::fma(acc[k], a, b);
#else
      acc[k] = std::fma(acc[k], a, b);
#endif
    }
  float s = 0;
  for (std::size_t k = 0; k < 12; ++k) {
#if defined(TYPEFLOW_HAS_XSIMD)
    s += xsimd::hadd(acc[k]);
#else
    s += acc[k];
#endif
  }
  sink += s;
  return 2.0 * 12.0 * static_cast<double>(lanes) * static_cast<double>(reps);
}

/// Runs f(t) on threads 0..n-1 at once; returns the seconds the slowest took.
template <class F>
double timed_parallel(int n, F f) {
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  for (int t = 1; t < n; ++t)
    ts.emplace_back([&f, t] { f(t); });
  f(0);
  for (auto& t : ts)
    t.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
} // namespace detail

/// Measures the roofs (about a quarter of a second); 0 threads: one per hardware thread.
TYPEFLOW_DECL_DEFERRED roofline measure_roofline(int threads = 0)
#if TYPEFLOW_BODIES
{
  roofline r;
  r.threads =
      threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  // Bandwidth: each thread copies its share of 128 MiB, best of 5.
  const std::size_t n = (std::size_t{64} << 20) / sizeof(float);
  std::vector<float> src(n, 1.0f), dst(n, 0.0f);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const double s = detail::timed_parallel(r.threads, [&](int t) {
      const std::size_t per = n / static_cast<std::size_t>(r.threads);
      const std::size_t b = per * static_cast<std::size_t>(t);
      const std::size_t e = t + 1 == r.threads ? n : b + per;
      std::memcpy(dst.data() + b, src.data() + b, (e - b) * sizeof(float));
    });
    best = std::min(best, s);
  }
  r.bandwidth = 2.0 * static_cast<double>(n * sizeof(float)) / best;
  // FMA throughput: best of 3.
  std::vector<float> sinks(static_cast<std::size_t>(r.threads));
  double flops = 0;
  best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const double s = detail::timed_parallel(r.threads, [&](int t) {
      const double f = detail::fma_chains(std::size_t{1} << 23, sinks[static_cast<std::size_t>(t)]);
      if (t == 0)
        flops = f;
    });
    best = std::min(best, s);
  }
  r.flops = flops * r.threads / best;
  volatile float keep = sinks[0] + dst[n / 2];
  (void)keep;
  return r;
}
#else
    ;
#endif

} // namespace typeflow
