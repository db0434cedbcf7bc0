// A recorded step trace (runtime/trace.hpp) as a file and as a summary:
//   write_chrome_trace / save_chrome_trace: Chrome's trace-event JSON (opens in Perfetto,
//     ui.perfetto.dev, and chrome://tracing): one process per device with a track per host
//     thread, transfers on their destination's "transfers" track, all-reduces on their own
//     process, every run's span on the "session" process;
//   make_profile: where the time goes, per kind of op: time, share of the run, bytes and FLOPs
//     moved and done, and how close each kind comes to the machine's roofs (measure_roofline).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "../core/compiled.hpp"
#include "../core/error.hpp"
#include "../runtime/trace.hpp"

#if TYPEFLOW_BODIES // (nlohmann-json only where the bodies are compiled: io/checkpoint.hpp)
#include <nlohmann/json.hpp>
#endif

namespace typeflow {

namespace detail {
/// The trace's process ids: the session's runs, the all-reduces, then one per device.
inline int trace_pid(const trace_event& e) {
  if (e.what == trace_event::type::run)
    return 1;
  if (e.what == trace_event::type::all_reduce)
    return 2;
  return (e.device.is_cpu ? 10 : 1000) + e.device.index;
}
inline constexpr int transfer_tid = 1 << 20;
inline std::string trace_kernel(const trace_event& e) {
  switch (e.what) {
  case trace_event::type::run:
    return "run";
  case trace_event::type::all_reduce:
    return "all-reduce";
  case trace_event::type::transfer:
    return "transfer";
  case trace_event::type::step:
    return e.plan ? e.plan->kernel[e.node] : "step";
  }
  return "?";
}
} // namespace detail

/// Writes `events` as Chrome trace-event JSON (the "JSON Object Format": traceEvents plus
/// metadata naming each process and track). Times are microseconds since the recorder was made.
TYPEFLOW_DECL_DEFERRED void write_chrome_trace(std::ostream& os,
                                               const std::vector<trace_event>& events)
#if TYPEFLOW_BODIES
{
  using json = nlohmann::ordered_json;
  json list = json::array();
  std::map<int, std::string> processes;
  std::map<std::pair<int, int>, std::string> tracks;
  for (const trace_event& e : events) {
    const int pid = detail::trace_pid(e);
    int tid = static_cast<int>(e.thread);
    const std::string thread = std::to_string(e.thread);
    std::string track = "thread ";
    track += thread;
    switch (e.what) {
    case trace_event::type::run:
      processes[pid] = "session";
      track = "runs (thread ";
      track += thread;
      track += ')';
      break;
    case trace_event::type::all_reduce:
      processes[pid] = "all-reduce";
      tid = 0;
      track = "all-reduce";
      break;
    case trace_event::type::transfer:
      processes[pid] = e.device.name();
      tid = detail::transfer_tid;
      track = "transfers (in)";
      break;
    case trace_event::type::step:
      processes[pid] = e.device.name();
      if (!e.device.is_cpu) {
        track = "stream (host thread ";
        track += thread;
        track += ')';
      }
      break;
    }
    tracks[{pid, tid}] = track;
    json args = json::object();
    if (e.plan && (e.what == trace_event::type::step || e.what == trace_event::type::transfer))
      args["node"] = e.plan->label[e.node];
    if (e.what == trace_event::type::transfer)
      args["to"] = e.device.name();
    args["run"] = e.run;
    args["bytes"] = e.bytes;
    if (e.flops >= 0)
      args["flops"] = e.flops;
    if (e.duration > 0 && e.what != trace_event::type::run) {
      args["GB/s"] = static_cast<double>(e.bytes) / e.duration / 1e9;
      if (e.flops >= 0)
        args["GFLOP/s"] = e.flops / e.duration / 1e9;
    }
    const char* cat = e.what == trace_event::type::step       ? "step"
                      : e.what == trace_event::type::transfer ? "transfer"
                      : e.what == trace_event::type::run      ? "run"
                                                              : "all-reduce";
    list.push_back(json{{"name", detail::trace_kernel(e)},
                        {"cat", cat},
                        {"ph", "X"},
                        {"ts", e.start * 1e6},
                        {"dur", e.duration * 1e6},
                        {"pid", pid},
                        {"tid", tid},
                        {"args", std::move(args)}});
  }
  json meta = json::array();
  for (const auto& [pid, name] : processes) {
    meta.push_back(json{{"name", "process_name"},
                        {"ph", "M"},
                        {"pid", pid},
                        {"tid", 0},
                        {"args", {{"name", name}}}});
    meta.push_back(json{{"name", "process_sort_index"},
                        {"ph", "M"},
                        {"pid", pid},
                        {"tid", 0},
                        {"args", {{"sort_index", pid}}}});
  }
  for (const auto& [key, name] : tracks)
    meta.push_back(json{{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", key.first},
                        {"tid", key.second},
                        {"args", {{"name", name}}}});
  for (auto& e : list)
    meta.push_back(std::move(e));
  const json doc{{"traceEvents", std::move(meta)},
                 {"displayTimeUnit", "ms"},
                 {"otherData", {{"generator", "typeflow"}}}};
  os << doc.dump(1) << '\n';
}
#else
    ;
#endif

/// Writes the recorder's events to `path` as Chrome trace-event JSON; throws typeflow::error
/// when the file cannot be written.
TYPEFLOW_DECL_DEFERRED void save_chrome_trace(const trace_recorder& rec,
                                              const std::filesystem::path& path)
#if TYPEFLOW_BODIES
{
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f)
    throw error(std::string("save_chrome_trace: cannot open ")
                    .append(path.string())
                    .append(" for writing"));
  write_chrome_trace(f, rec.events());
  f.close();
  if (!f)
    throw error(std::string("save_chrome_trace: writing ").append(path.string()).append(" failed"));
}
#else
    ;
#endif

/// Where the time of the recorded runs goes, per kind of op.
struct profile {
  struct row {
    std::string kind;           ///< "conv2d", "elementwise", "transfer", "all-reduce", ...
    double calls = 0;           ///< per run
    double seconds = 0;         ///< per run
    double share = 0;           ///< of a run's time
    double bytes = 0;           ///< per run
    double flops = -1;          ///< per run; -1 when an op of the kind has no FLOP count
    double gbps = 0;            ///< achieved GB/s
    double gflops = -1;         ///< achieved GFLOP/s (-1: unknown)
    double roof = 0;            ///< attained fraction of the roof at this intensity
    bool compute_bound = false; ///< past the ridge point (FLOPs per byte above peak/bandwidth)
  };
  std::size_t runs = 0;
  double run_seconds = 0;  ///< mean wall time of a run
  double step_seconds = 0; ///< mean time of a run in its steps, transfers and all-reduces
  roofline machine;
  std::vector<row> rows; ///< by time, largest first

  /// A plain-text table.
  std::string str() const { return render(false); }
  /// The same as a Markdown table.
  std::string markdown() const { return render(true); }

private:
  std::string render(bool md) const {
    std::string s;
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "where the time goes: %zu run%s, %.3f ms per run, %.3f ms of it in steps "
                  "(%s)\n",
                  runs, runs == 1 ? "" : "s", run_seconds * 1e3, step_seconds * 1e3,
                  machine.str().c_str());
    s += buf;
    if (md)
      s += "\n| op | calls | ms | share | GB/s | GFLOP/s | FLOP/byte | of roof | bound |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|---|\n";
    else {
      std::snprintf(buf, sizeof buf, "%-34s %6s %9s %7s %8s %9s %9s %7s  %s\n", "op", "calls", "ms",
                    "share", "GB/s", "GFLOP/s", "FLOP/B", "of roof", "bound");
      s += buf;
    }
    for (const row& r : rows) {
      char flops[32] = "-", intensity[32] = "-";
      if (r.gflops >= 0)
        std::snprintf(flops, sizeof flops, "%.2f", r.gflops);
      if (r.flops >= 0 && r.bytes > 0)
        std::snprintf(intensity, sizeof intensity, "%.2f", r.flops / r.bytes);
      const char* bound = r.compute_bound ? "compute" : "memory";
      if (md)
        std::snprintf(buf, sizeof buf,
                      "| %s | %.0f | %.3f | %.1f %% | %.2f | %s | %s | %.0f %% | %s |\n",
                      r.kind.c_str(), r.calls, r.seconds * 1e3, r.share * 100, r.gbps, flops,
                      intensity, r.roof * 100, bound);
      else
        std::snprintf(buf, sizeof buf, "%-34.34s %6.0f %9.3f %6.1f%% %8.2f %9s %9s %6.0f%%  %s\n",
                      r.kind.c_str(), r.calls, r.seconds * 1e3, r.share * 100, r.gbps, flops,
                      intensity, r.roof * 100, bound);
      s += buf;
    }
    return s;
  }
};

/// Summarizes the recorded runs of `events` against the machine's roofs. A run's time is its
/// span; the kinds are the plan's (trace_plan::kind), plus "transfer" and "all-reduce".
TYPEFLOW_DECL_DEFERRED profile make_profile(const std::vector<trace_event>& events,
                                            const roofline& machine)
#if TYPEFLOW_BODIES
{
  profile p;
  p.machine = machine;
  std::map<std::string, profile::row> by_kind;
  std::map<std::string, bool> unknown_flops;
  double run_total = 0, step_total = 0;
  for (const trace_event& e : events) {
    if (e.what == trace_event::type::run) {
      ++p.runs;
      run_total += e.duration;
      continue;
    }
    const std::string kind = e.what == trace_event::type::step
                                 ? (e.plan ? e.plan->kind[e.node] : std::string("step"))
                                 : detail::trace_kernel(e);
    profile::row& r = by_kind[kind];
    r.kind = kind;
    r.calls += 1;
    r.seconds += e.duration;
    r.bytes += static_cast<double>(e.bytes);
    if (e.flops < 0)
      unknown_flops[kind] = true;
    else
      r.flops = (r.flops < 0 ? 0 : r.flops) + e.flops;
    step_total += e.duration;
  }
  const double runs = p.runs ? static_cast<double>(p.runs) : 1.0;
  p.run_seconds = run_total / runs;
  p.step_seconds = step_total / runs;
  const double ridge = machine.bandwidth > 0 ? machine.flops / machine.bandwidth : 0;
  for (auto& [kind, r] : by_kind) {
    if (unknown_flops[kind])
      r.flops = -1;
    r.gbps = r.seconds > 0 ? r.bytes / r.seconds / 1e9 : 0;
    r.gflops = r.flops >= 0 && r.seconds > 0 ? r.flops / r.seconds / 1e9 : -1;
    const double intensity = r.flops >= 0 && r.bytes > 0 ? r.flops / r.bytes : 0;
    r.compute_bound = intensity > ridge && ridge > 0;
    if (r.compute_bound)
      r.roof = machine.flops > 0 ? r.gflops * 1e9 / machine.flops : 0;
    else
      r.roof = machine.bandwidth > 0 ? r.gbps * 1e9 / machine.bandwidth : 0;
    r.calls /= runs;
    r.seconds /= runs;
    r.bytes /= runs;
    if (r.flops >= 0)
      r.flops /= runs;
    r.share = p.run_seconds > 0 ? r.seconds / p.run_seconds : 0;
    p.rows.push_back(r);
  }
  std::sort(p.rows.begin(), p.rows.end(),
            [](const profile::row& a, const profile::row& b) { return a.seconds > b.seconds; });
  return p;
}
#else
    ;
#endif
TYPEFLOW_DECL_DEFERRED profile make_profile(const trace_recorder& rec, const roofline& machine)
#if TYPEFLOW_BODIES
{
  return make_profile(rec.events(), machine);
}
#else
    ;
#endif

} // namespace typeflow
