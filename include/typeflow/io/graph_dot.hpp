// The plan as a picture: GraphViz DOT from compile::plan, and SVG/PNG/PDF through Graphviz's `dot`.
//
//   std::string dot = ty::to_dot<P>();            // P = ty::compile::plan<fetches, placement>
//   std::string dot = ty::to_dot<Placement>(ty::fetch(loss, train));
//   ty::save_graph(dot, "train.svg");             // .dot as is; .svg, .png, .pdf through `dot`
//
// What the picture shows: every node (placeholders as inputs, variables as cylinders, ops as
// boxes labelled `%index op`, dtype and static shape, `?` for a fed extent), filled by device;
// each fused region (one kernel), epilogue (a producer with its bias and relu) and prologue (a
// reduction over a fused loop) as a dashed cluster, or as one box with `collapse_regions`;
// transfers as red dashed `send/recv` edges; assignments as green edges back to their variable;
// and the training graph's parts apart: forward (what the fetched values need), gradients (what
// the gradients need beyond that, up to their replica_mean) and the update (the optimizer's
// assignments and what only they read). Without a fetched value (the loss beside the training
// op) forward and gradients cannot be told apart and are drawn as one part, "compute".
#pragma once
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../compile/plan.hpp"
#include "../core/compiled.hpp"
#include "../core/error.hpp"
#include "../ops/layout.hpp"
#include "../runtime/feed.hpp"

extern char** environ;

namespace typeflow {

struct dot_options {
  /// Each fused region, epilogue and prologue as one box (large graphs stay readable).
  bool collapse_regions = false;
  /// Draw the constants folded into fused loops (as small plain nodes).
  bool show_inline_constants = false;
  /// The picture's title (default: the node, step and device counts).
  std::string title = {};
};

/// The parts of a drawn graph (dot_graph_parts<P>()): what each node belongs to.
enum class graph_part { input, forward, gradients, update, compute };

namespace detail {
/// Appends the pieces to s (strings are built by appending only: g++ 12 warns falsely,
/// -Wrestrict, bug 105329, on `"literal" + std::string` at -O2).
template <class... A>
void append(std::string& s, const A&... a) {
  (s.append(std::string_view(a)), ...);
}
inline std::string dot_escape(std::string_view s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\')
      o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}
inline const char* device_fill(const device_id& d) {
  static const char* cpu[] = {"#c6dbef", "#c7e9c0", "#dadaeb", "#fdd0a2", "#d9d9d9", "#fcc5c0"};
  static const char* gpu[] = {"#fdae6b", "#fc9272", "#bcbddc", "#a1d99b", "#9ecae1", "#fdd49e"};
  const std::size_t k = static_cast<std::size_t>(d.index < 0 ? 0 : d.index) % 6;
  return d.is_cpu ? cpu[k] : gpu[k];
}
inline std::string short_device(const device_id& d) {
  std::string s = d.is_cpu ? "CPU:" : "GPU:";
  s += std::to_string(d.index);
  return s;
}

/// The part of the training graph each node belongs to (see the header comment). A gradient
/// ends at a replica_mean (minimize() puts one on every gradient).
TYPEFLOW_DECL_DEFERRED std::vector<graph_part> graph_parts(const compile::plan_view& v)
#if TYPEFLOW_BODIES
{
  const std::size_t n = v.size;
  std::vector<bool> value_fetch(n), forward(n), update(n), before_mean(n), before_update(n),
      is_mean(n);
  bool any_value_fetch = false;
  for (std::size_t i = 0; i < n; ++i) {
    is_mean[i] = v.op[i] == ops::replica_mean::name;
    value_fetch[i] = v.fetched[i] && !v.group[i] && !v.state[i];
    any_value_fetch = any_value_fetch || value_fetch[i];
  }
  // Consumers come after their operands: one pass down for "reads a replica_mean or an
  // assignment", one pass up for "is read by".
  for (std::size_t j = 0; j < n; ++j) {
    update[j] = v.state[j] || v.group[j];
    for (std::size_t e = v.edge_begin[j]; e < v.edge_begin[j + 1] && !update[j]; ++e)
      update[j] = is_mean[v.edges[e]] || update[v.edges[e]];
  }
  for (std::size_t j = n; j-- > 0;) {
    forward[j] = forward[j] || value_fetch[j];
    before_mean[j] = before_mean[j] || is_mean[j];
    before_update[j] = before_update[j] || update[j];
    for (std::size_t e = v.edge_begin[j]; e < v.edge_begin[j + 1]; ++e) {
      const std::size_t k = v.edges[e];
      forward[k] = forward[k] || forward[j];
      before_mean[k] = before_mean[k] || before_mean[j];
      before_update[k] = before_update[k] || before_update[j];
    }
  }
  std::vector<graph_part> part(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (v.placeholder[i] || v.variable[i] || v.constant[i])
      part[i] = graph_part::input;
    else if (update[i])
      part[i] = graph_part::update;
    else if (!any_value_fetch && before_mean[i])
      part[i] = graph_part::compute;
    else if (forward[i])
      part[i] = graph_part::forward;
    else if (before_mean[i])
      part[i] = graph_part::gradients;
    else if (before_update[i])
      part[i] = graph_part::update;
    else
      part[i] = any_value_fetch ? graph_part::forward : graph_part::compute;
  }
  return part;
}
#else
    ;
#endif

/// The DOT text of a plan (see to_dot).
TYPEFLOW_DECL_DEFERRED std::string dot_text(const compile::plan_view& v, const dot_options& o)
#if TYPEFLOW_BODIES
{
  using graph::step_kind;
  const std::size_t n = v.size;
  constexpr std::size_t none = static_cast<std::size_t>(-1);
  const std::vector<graph_part> part = graph_parts(v);

  // The unit each node is drawn in: its step, the epilogue that runs its producer, or the
  // prologue that reads its region.
  std::vector<std::size_t> unit(n);
  for (std::size_t i = 0; i < n; ++i)
    unit[i] = v.root[i] == none ? i : v.root[i];
  for (std::size_t r = 0; r < n; ++r) {
    if (v.step[r] == step_kind::epilogue || v.step[r] == step_kind::chained)
      unit[v.producer[r]] = r;
    if (v.step[r] == step_kind::prologue)
      for (std::size_t m = v.member_begin[v.source[r]]; m < v.member_begin[v.source[r] + 1]; ++m)
        unit[v.members[m]] = r;
  }
  std::vector<bool> shown(n);
  std::vector<std::size_t> unit_size(n);
  std::vector<std::string> unit_ops(n); // the ops drawn in each unit, in node order
  for (std::size_t i = 0; i < n; ++i) {
    const bool inline_constant = v.step[i] == step_kind::inline_constant;
    shown[i] = !inline_constant || o.show_inline_constants;
    if (!inline_constant) {
      ++unit_size[unit[i]];
      append(unit_ops[unit[i]], unit_ops[unit[i]].empty() ? "" : ", ", v.op[i]);
    }
  }
  const auto clustered = [&](std::size_t i) {
    return v.step[i] != step_kind::inline_constant && unit_size[unit[i]] > 1;
  };
  const auto unit_label = [&](std::size_t u) {
    std::string s;
    if (v.step[u] == step_kind::epilogue)
      append(s, v.op[v.producer[u]], " + bias_add", v.relu[u] ? " + relu" : "", ": one step");
    else if (v.step[u] == step_kind::prologue)
      append(s, v.op[u], " over a fused loop: one step");
    else if (v.step[u] == step_kind::chained)
      append(s, v.op[v.producer[u]], " chained to a fused loop: one step");
    else
      append(s, "fused: ", std::to_string(unit_size[u]), " ops, one kernel");
    return s;
  };

  // Devices, in order of first use.
  std::vector<device_id> devices;
  for (std::size_t i = 0; i < n; ++i) {
    bool seen = false;
    for (const auto& d : devices)
      seen = seen || d == v.device[i];
    if (!seen && shown[i])
      devices.push_back(v.device[i]);
  }

  const auto dtype_shape = [&](std::size_t i) {
    std::string s;
    if (!v.dtype[i].empty())
      append(s, "\n", v.dtype[i], " ", v.shape[i].str());
    return s;
  };
  const auto node_line = [&](std::size_t i) {
    std::string text;
    if (v.placeholder[i] || v.variable[i] || v.constant[i])
      append(text, v.label(i), dtype_shape(i));
    else
      append(text, "%", std::to_string(i), " ", v.op[i], dtype_shape(i));
    const char* attrs = "style=\"filled,rounded\"";
    if (v.variable[i])
      attrs = "shape=cylinder";
    else if (v.placeholder[i])
      attrs = "shape=invhouse";
    else if (v.step[i] == step_kind::inline_constant)
      attrs = "shape=plaintext, fontsize=8, style=\"\"";
    else if (v.constant[i])
      attrs = "shape=note";
    else if (v.group[i])
      attrs = "shape=octagon";
    else if (v.state[i])
      attrs = "style=\"filled,bold\", color=\"#2ca02c\"";
    std::string tip;
    append(tip, "%", std::to_string(i), " = ", v.label(i), " @", v.device[i].name());
    std::string s;
    append(s, "n", std::to_string(i), " [id=\"n", std::to_string(i), "\", label=\"",
           dot_escape(text), "\", tooltip=\"", dot_escape(tip), "\", fillcolor=\"",
           device_fill(v.device[i]), "\", ", attrs, "];\n");
    return s;
  };
  const auto unit_box = [&](std::size_t u) {
    std::string text, s;
    append(text, "%", std::to_string(u), " ", unit_label(u), "\n", unit_ops[u], dtype_shape(u));
    append(s, "n", std::to_string(u), " [id=\"n", std::to_string(u), "\", label=\"",
           dot_escape(text), "\", fillcolor=\"", device_fill(v.device[u]),
           "\", style=\"filled,rounded,bold\"];\n");
    return s;
  };

  std::string title = o.title;
  if (title.empty())
    append(title, std::to_string(n), " nodes, ", std::to_string(v.steps), " steps, ",
           std::to_string(devices.size()), devices.size() == 1 ? " device, " : " devices, ",
           std::to_string(v.transfers), v.transfers == 1 ? " transfer" : " transfers");
  std::string s = "digraph typeflow {\n";
  append(s,
         "  graph [rankdir=TB, fontname=\"Helvetica\", fontsize=12, newrank=true, labelloc=t, "
         "label=\"",
         dot_escape(title), "\"];\n");
  s += "  node [fontname=\"Helvetica\", fontsize=10, shape=box, style=filled, "
       "color=\"#444444\"];\n";
  s += "  edge [fontname=\"Helvetica\", fontsize=8, color=\"#666666\", arrowsize=0.6];\n";

  // Inputs (placeholders, variables, materialized constants) at the top level.
  for (std::size_t i = 0; i < n; ++i)
    if (shown[i] && part[i] == graph_part::input)
      append(s, "  ", node_line(i));
  struct part_style {
    graph_part p;
    const char *name, *label, *fill;
  };
  static constexpr part_style parts[] = {
      {graph_part::forward, "forward", "forward", "#f7f7f7"},
      {graph_part::compute, "compute", "compute (fetch the loss to see the gradients apart)",
       "#f7f7f7"},
      {graph_part::gradients, "gradients", "gradients", "#fff4e6"},
      {graph_part::update, "update", "update (optimizer)", "#eef8ee"},
  };
  for (const part_style& ps : parts) {
    std::string body;
    // A unit's cluster goes into the part of the unit's step.
    std::map<std::size_t, std::string> units;
    for (std::size_t i = 0; i < n; ++i) {
      if (!shown[i] || part[i] == graph_part::input)
        continue;
      if (!clustered(i)) {
        if (part[i] == ps.p)
          append(body, "    ", node_line(i));
        continue;
      }
      if (part[unit[i]] != ps.p)
        continue;
      if (!o.collapse_regions)
        append(units[unit[i]], "      ", node_line(i));
      else if (i == unit[i])
        append(body, "    ", unit_box(i));
    }
    for (const auto& [u, nodes] : units)
      append(body, "    subgraph cluster_u", std::to_string(u), " {\n      id=\"region",
             std::to_string(u), "\"; label=\"", dot_escape(unit_label(u)),
             "\"; style=\"dashed,rounded\"; color=\"#888888\"; fontsize=9;\n", nodes, "    }\n");
    if (!body.empty())
      append(s, "  subgraph cluster_", ps.name, " {\n    id=\"", ps.name, "\"; label=\"", ps.label,
             "\"; style=\"filled,rounded\"; fillcolor=\"", ps.fill, "\"; color=\"#bbbbbb\";\n",
             body, "  }\n");
  }

  // Edges, operand to consumer (in collapsed units, between their boxes).
  const auto at = [&](std::size_t i) { return o.collapse_regions && clustered(i) ? unit[i] : i; };
  for (std::size_t j = 0; j < n; ++j) {
    if (!shown[j])
      continue;
    for (std::size_t e = v.edge_begin[j]; e < v.edge_begin[j + 1]; ++e) {
      const std::size_t k = v.edges[e];
      const std::size_t a = at(k), b = at(j);
      if (!shown[k] || a == b)
        continue;
      if (v.state[j] && e == v.edge_begin[j]) {
        // an assignment's target: drawn as the new value going back into the variable
        append(s, "  n", std::to_string(b), " -> n", std::to_string(a), " [label=\"", v.op[j],
               "\", color=\"#2ca02c\", fontcolor=\"#2ca02c\", style=bold, "
               "constraint=false];\n");
        continue;
      }
      append(s, "  n", std::to_string(a), " -> n", std::to_string(b));
      if (v.edge_transfer[e] != none)
        append(s, " [id=\"t", std::to_string(e), "\", label=\"send/recv\\nto ",
               short_device(v.transfer_device[v.edge_transfer[e]]),
               "\", color=\"#d62728\", fontcolor=\"#d62728\", style=dashed, penwidth=1.6]");
      s += ";\n";
    }
  }

  // The legend: one box per device.
  s += "  subgraph cluster_devices {\n    id=\"devices\"; label=\"devices\"; style=rounded; "
       "color=\"#bbbbbb\";\n";
  for (std::size_t k = 0; k < devices.size(); ++k)
    append(s, "    device", std::to_string(k), " [id=\"device", std::to_string(k), "\", label=\"",
           devices[k].name(), "\", fillcolor=\"", device_fill(devices[k]), "\", shape=box];\n");
  s += "  }\n}\n";
  return s;
}
#else
    ;
#endif

} // namespace detail

/// The part of the training graph each node of plan P belongs to (see the header comment).
template <class P>
std::vector<graph_part> dot_graph_parts() {
  return detail::graph_parts(P::view());
}

/// Plan P as a GraphViz DOT digraph.
template <class P>
std::string to_dot(const dot_options& o = {}) {
  return detail::dot_text(P::view(), o);
}

/// The plan of `fetches` placed by Placement, as to_dot<P>.
template <class Placement = on<cpu<0>>, class... F>
std::string to_dot(fetch_t<F...>, const dot_options& o = {}) {
  return to_dot<compile::plan<type_list<F...>, Placement>>(o);
}

/// Writes a DOT text to `path`: as is for .dot and .gv, else rendered by Graphviz's `dot`
/// (Debian's graphviz) in the format the extension names (.svg, .png, .pdf). Throws
/// typeflow::error when the file cannot be written or `dot` is missing or fails; a failed
/// render leaves whatever was at `path` untouched.
TYPEFLOW_DECL_DEFERRED void save_graph(const std::string& dot, const std::filesystem::path& path)
#if TYPEFLOW_BODIES
{
  namespace fs = std::filesystem;
  std::string ext = path.extension().string();
  if (!ext.empty())
    ext.erase(0, 1);
  const bool text = ext == "dot" || ext == "gv";
  if (!text && ext != "svg" && ext != "png" && ext != "pdf")
    throw error(std::string("save_graph: ")
                    .append(path.string())
                    .append(": unknown format (.dot, .gv, .svg, .png or .pdf)"));
  const fs::path out = text ? path : fs::path(path.string() + ".dot.tmp");
  {
    std::ofstream f(out, std::ios::binary | std::ios::trunc);
    f << dot;
    f.close();
    if (!f)
      throw error(std::string("save_graph: cannot write ").append(out.string()));
  }
  if (text)
    return;
  // dot renders into a temporary beside `path`, renamed over it only when dot succeeded: a
  // failed render leaves an existing picture as it was.
  const fs::path rendered(path.string() + ".render.tmp");
  const std::string format = std::string("-T").append(ext),
                    output = std::string("-o").append(rendered.string()), input = out.string();
  char* argv[] = {const_cast<char*>("dot"), const_cast<char*>(format.c_str()),
                  const_cast<char*>(output.c_str()), const_cast<char*>(input.c_str()), nullptr};
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, "dot", nullptr, nullptr, argv, environ);
  int status = 0;
  if (spawned == 0)
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  std::error_code ec;
  fs::remove(out, ec);
  if (spawned != 0)
    throw error(std::string("save_graph: cannot run Graphviz's dot for ")
                    .append(path.string())
                    .append(" (install graphviz, or save as .dot)"));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fs::remove(rendered, ec);
    throw error(std::string("save_graph: Graphviz's dot failed to render ").append(path.string()));
  }
  fs::rename(rendered, path, ec);
  if (ec) {
    fs::remove(rendered, ec);
    throw error(std::string("save_graph: cannot write ").append(path.string()));
  }
}
#else
    ;
#endif

} // namespace typeflow
