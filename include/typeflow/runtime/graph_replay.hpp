// A run as one CUDA graph, on the executor's public interface.
//
// A plan whose every step runs on one GPU, fed only from placeholders, is captured the second
// time it runs with given feed extents (the first warms up kernel by kernel: libraries load
// their kernels and convolutions time their algorithms, neither of which a capture allows):
// the steps and the assignments are recorded as one CUDA graph, its buffers held for it; later
// runs with the same extents upload the feeds into the graph's buffers and launch it once. No
// step waits for the host: device-side checks are read after the launch, and the assignments are
// skipped on the device when one failed.
//
// The executor asks `capturable<P>()` and `warmed_up<P>(values)`, then lets `run<P>` take the
// run; it holds one graph_replay, whose records keep the graphs and their buffers.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "../backend/common/backend.hpp"
#include "../backend/common/value.hpp"
#include "../compile/plan.hpp"
#include "../device/device.hpp"
#include "../graph/op_traits.hpp"

namespace typeflow {

/// The CUDA graphs of an executor `Ex`'s plans: see above.
template <class Ex>
class graph_replay {
  using value = backend::rt_value;

public:
  /// Whether plan P can run as one graph: every step on one device whose backend captures runs
  /// (a GPU), fed only from placeholders, no host constant, no random draws (a replayed graph
  /// would draw the same mask every run).
  template <class P>
  static consteval bool capturable() {
    if constexpr (P::size == 0 || !one_device<P>())
      return false;
    else
      return captures_runs<typename P::template device<first_step<P>()>>() && !draws<P>();
  }
  /// Whether this plan ran before with these feed extents (else they are noted, and the run
  /// goes kernel by kernel).
  template <class P>
  bool warmed_up(const value* vals) {
    std::vector<std::int64_t> key;
    for (std::size_t i = 0; i < P::size; ++i)
      if (P::fact.placeholder[i]) {
        key.push_back(static_cast<std::int64_t>(vals[i].dims.rank));
        key.insert(key.end(), vals[i].dims.d.begin(), vals[i].dims.d.begin() + vals[i].dims.rank);
      }
    static char plan_key; // one per plan type (its address)
    return !warmed_[&plan_key].insert(std::move(key)).second;
  }

private:
  /// Whether node i of plan P is a step the device runs (not a placeholder, a group, a fused
  /// region's member or a constant inlined into its readers).
  template <class P>
  static constexpr bool is_step(std::size_t i) {
    const auto k = P::layout.step[i];
    return !P::fact.placeholder[i] && k != graph::step_kind::group &&
           k != graph::step_kind::fused_member && k != graph::step_kind::inline_constant;
  }
  /// The first of plan P's steps (P::size: none).
  template <class P>
  static consteval std::size_t first_step() {
    for (std::size_t i = 0; i < P::size; ++i)
      if (is_step<P>(i))
        return i;
    return P::size;
  }
  /// Whether every step of plan P is on the first step's device, with no host constant and no
  /// variable fetched as the run assigns it, and every transfer brings a fed value there.
  template <class P>
  static consteval bool one_device() {
    constexpr std::size_t first = first_step<P>();
    if (first == P::size)
      return false;
    const auto& pl = P::placement;
    const device_id d = pl.device[first];
    for (std::size_t i = 0; i < P::size; ++i) {
      if (!is_step<P>(i))
        continue;
      const auto k = P::layout.step[i];
      if (k == graph::step_kind::constant ||
          (P::fact.fetched[i] && k == graph::step_kind::variable))
        return false; // a host constant; a variable fetched as the run assigns it
      if (pl.device[i] != d)
        return false;
    }
    for (std::size_t t = 0; t < pl.transfers; ++t)
      if (!P::fact.placeholder[pl.transfer_source[t]] || pl.transfer_device[t] != d)
        return false;
    return true;
  }
  /// Whether an op of plan P draws random numbers per run.
  template <class P>
  static consteval bool draws() {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      const bool d[] = {op_traits<typename P::template node<I>::op>::draws..., false};
      for (bool b : d)
        if (b)
          return true;
      return false;
    }
    (std::make_index_sequence<P::size>{});
  }

  /// A captured run: the graph, the feed extents and variable buffers it was captured with,
  /// every value's buffer and extents (not owned: the graph holds the buffers), its statistics.
  struct graph_record {
    std::shared_ptr<void> graph;
    std::vector<std::int64_t> key;
    std::vector<value> vals;
    backend::run_stats stats;
  };

public:
  /// Runs plan P (whose every step is on one GPU) as one CUDA graph: captured when the feed
  /// extents or the variables' buffers changed, else replayed. The fetched values are then in
  /// `vals`, as after the steps.
  template <class P>
  void run(Ex& ex, value* vals) {
    backend::session_state& st = ex.state();
    using D = typename P::template device<first_step<P>()>;
    constexpr auto& f = P::fact;
    constexpr auto& pl = P::placement;
    // The variables on the GPU (uploaded when the host copy is newer), outside any capture.
    ex.template bind_variables<P>(vals);
    std::vector<std::int64_t> key;
    for (std::size_t i = 0; i < P::size; ++i)
      if (f.placeholder[i]) {
        key.push_back(static_cast<std::int64_t>(vals[i].dims.rank));
        key.insert(key.end(), vals[i].dims.d.begin(), vals[i].dims.d.begin() + vals[i].dims.rank);
      } else if (P::layout.step[i] == graph::step_kind::variable) {
        key.push_back(static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(vals[i].data)));
      }
    static char plan_key; // one per plan type (its address)
    graph_record& rec = graphs_[&plan_key];
    const bool capture = !rec.graph || rec.key != key;
    if (capture) {
      rec = graph_record{};
      device_backend<D>::begin_capture(st);
      st.capturing = true;
      try {
        ex.template run_steps<P, 0>(vals, std::make_index_sequence<P::size>{});
        ex.template commit_steps<P>(vals, std::make_index_sequence<P::size>{});
        backend::end_commits(st);
      } catch (...) {
        // The graph keeps the capture's buffers until the next capture replaces it: values of
        // this run still hold some, and give them back as they go.
        st.capturing = false;
        rec.graph = device_backend<D>::end_capture(st, false);
        throw;
      }
      st.capturing = false;
      rec.graph = device_backend<D>::end_capture(st, true);
      rec.key = std::move(key);
      rec.vals.assign(vals, vals + P::slots);
      for (auto& v : rec.vals)
        v.owner.reset(); // the graph holds the buffers
      rec.stats = st.stats;
    } else {
      st.replaying = true;
      // the variables' flags only
      ex.template commit_steps<P>(vals, std::make_index_sequence<P::size>{});
      st.replaying = false;
    }
    st.stats = rec.stats;
    st.stats.graph_captures = capture ? 1 : 0;
    st.stats.graph_launches = 1;
    for (std::size_t t = 0; t < pl.transfers; ++t) {
      const value& src = vals[pl.transfer_source[t]];
      device_backend<D>::upload(st, rec.vals[P::size + t].data, src.data,
                                feed_bytes<P>(pl.transfer_source[t], src));
    }
    device_backend<D>::launch(st, rec.graph.get());
    for (std::size_t i = 0; i < P::slots; ++i)
      if (i >= P::size || !f.placeholder[i])
        vals[i] = rec.vals[i];
    backend::end_steps(st); // throws what a device-side check found (the commits were skipped)
  }

private:
  template <class P>
  static std::size_t feed_bytes(std::size_t node, const value& v) {
    return value_bytes_of<P>(node) * static_cast<std::size_t>(v.dims.numel());
  }
  template <class P>
  static std::size_t value_bytes_of(std::size_t node) {
    static constexpr auto table = []<std::size_t... I>(std::index_sequence<I...>) {
      return std::array<std::size_t, P::size>{
          backend::value_bytes<typename P::template node<I>::value_type>()...};
    }
    (std::make_index_sequence<P::size>{});
    return table[node];
  }

  std::map<const void*, graph_record> graphs_;                        ///< captured runs, by plan
  std::map<const void*, std::set<std::vector<std::int64_t>>> warmed_; ///< feed extents run, by plan
};

} // namespace typeflow
