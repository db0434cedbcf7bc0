// describe, the compiler's last stage: a plan in words. Every function here reads a plan_view
// (compile/tables.hpp), so its code is compiled once (in the one unit of non-template code under
// TYPEFLOW_SEPARATE_COMPILATION, core/compiled.hpp), not once per plan type.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "../core/compiled.hpp"
#include "../core/dtype.hpp"
#include "tables.hpp"

namespace typeflow::compile {

/// A text for every node of a plan, from the nodes' print entries and the plan's edges: a leaf
/// by its own text, any other node as `op(operands, attributes)`. With `spell` each operand is
/// its whole readable form (to_string); without, a short label (`conv2d(%3, conv1/weights)`:
/// operands by index, leaves by name). Strings are built by appending: g++ 12 warns falsely
/// (-Wrestrict, bug 105329) on `"literal" + std::string` at -O2.
TYPEFLOW_DECL_DEFERRED std::vector<std::string>
node_texts(const print_entry* entries, std::size_t size, const std::size_t* edge_begin,
           const std::size_t* edges, bool spell)
#if TYPEFLOW_BODIES
{
  std::vector<std::string> out(size);
  for (std::size_t i = 0; i < size; ++i) {
    const print_entry& e = entries[i];
    const bool no_operands = edge_begin[i] == edge_begin[i + 1];
    if ((e.leaf || e.named_leaf) && no_operands) {
      out[i] = e.leaf ? e.leaf() : std::string(e.name);
      continue;
    }
    std::string s(e.name);
    s += '(';
    for (std::size_t k = edge_begin[i]; k < edge_begin[i + 1]; ++k) {
      const std::size_t c = edges[k];
      if (k != edge_begin[i])
        s += ", ";
      if (spell ||
          (edge_begin[c] == edge_begin[c + 1] && (entries[c].leaf || entries[c].named_leaf))) {
        s += out[c];
      } else {
        s += '%';
        s += std::to_string(c);
      }
    }
    if (e.attrs) {
      const std::string a = e.attrs();
      if (!a.empty()) {
        if (!no_operands)
          s += ", ";
        s += a;
      }
    }
    s += ')';
    out[i] = std::move(s);
  }
  return out;
}
#else
    ;
#endif

/// How describe() names a step of each node kind.
constexpr std::string_view kind_name(node_kind k) {
  switch (k) {
  case node_kind::leaf:
    return "leaf";
  case node_kind::elementwise:
    return "fused";
  case node_kind::reduction:
    return "reduce";
  case node_kind::matmul:
    return "matmul";
  case node_kind::layout:
    return "layout";
  case node_kind::nn:
    return "nn";
  case node_kind::group:
    return "group";
  }
  return "?";
}

/// A readable listing of the steps: `%index = kind text`, with the number of fused ops.
TYPEFLOW_DECL_DEFERRED std::string describe(const plan_view& v)
#if TYPEFLOW_BODIES
{
  using graph::step_kind;
  std::string s;
  for (std::size_t i = 0; i < v.size; ++i) {
    if (v.root[i] != i)
      continue;
    s += "%" + std::to_string(i) + " = " + std::string(kind_name(v.kind[i])) + " " + v.string(i);
    const std::size_t fused = v.member_begin[i + 1] - v.member_begin[i] - 1;
    if (v.step[i] == step_kind::deferred && fused)
      s += "  [fused " + std::to_string(fused + 1) + " ops, evaluated in its reader's step]";
    else if (v.step[i] == step_kind::deferred)
      s += "  [runs in its reader's step]";
    else if (v.step[i] == step_kind::prologue)
      s += "  [reads %" + std::to_string(v.source[i]) + "'s fused loop]";
    else if (v.step[i] == step_kind::epilogue)
      s += std::string("  [epilogue of %") + std::to_string(v.producer[i]) +
           (v.relu[i] ? ": bias_add, relu]" : ": bias_add]");
    else if (v.step[i] == step_kind::chained)
      s += "  [fused " + std::to_string(fused + 1) + " ops, chained to %" +
           std::to_string(v.producer[i]) + "'s pieces]";
    else if (fused)
      s += "  [fused " + std::to_string(fused + 1) + " ops]";
    for (std::size_t m = v.member_begin[i]; m < v.member_begin[i + 1]; ++m)
      if (v.step[v.members[m]] == step_kind::fused_output)
        s += "  [also stores %" + std::to_string(v.members[m]) + "]";
    s += "\n";
  }
  return s;
}
#else
    ;
#endif

/// What step i computes in, given the products' precision on the CPU (`cpu`) and on the GPUs
/// (`gpu`), and whether the GPUs' float32 products may use TF32: its dtype, or, for a
/// convolution or matmul (alone or with its epilogue) of float32 whose products follow a lower
/// precision, that precision's products with float32 sums.
TYPEFLOW_DECL_DEFERRED std::string compute_dtype(const plan_view& v, std::size_t i, precision cpu,
                                                 bool gpu_tf32, precision gpu)
#if TYPEFLOW_BODIES
{
  const std::size_t p = v.step[i] == graph::step_kind::epilogue ? v.producer[i] : i;
  if (v.products[p] && v.dtype[p] == "float32") {
    const bool on_cpu = v.device[i].is_cpu;
    const precision q = on_cpu ? cpu : gpu;
    if (q == precision::bfloat16)
      return "bfloat16 products, float32 sums";
    if (q == precision::float16)
      return "float16 products, float32 sums";
    if (!on_cpu && gpu_tf32)
      return "tf32 products, float32 sums";
  }
  return std::string(v.dtype[i]);
}
#else
    ;
#endif

/// describe() with each step's device and compute dtype (see compute_dtype), and every transfer
/// after the step that produces its tensor.
TYPEFLOW_DECL_DEFERRED std::string describe_placement(const plan_view& v, precision cpu,
                                                      bool gpu_tf32, precision gpu)
#if TYPEFLOW_BODIES
{
  std::string s;
  for (std::size_t i = 0; i < v.size; ++i) {
    if (v.root[i] == i) {
      s += "%" + std::to_string(i) + " = " + std::string(kind_name(v.kind[i])) + " " + v.string(i) +
           "  @" + v.device[i].name();
      if (v.fell_back[i])
        s += " (soft placement: no kernel on the requested device)";
      if (!v.no_buffer[i] && v.step[i] != graph::step_kind::inline_constant)
        s += "  [" + compute_dtype(v, i, cpu, gpu_tf32, gpu) + "]";
      s += "\n";
    }
    for (std::size_t q = v.source_begin[i]; q < v.source_begin[i + 1]; ++q) {
      const std::size_t t = v.by_source[q];
      s += "  transfer %" + std::to_string(i) + " -> " + v.transfer_device[t].name() + "\n";
    }
  }
  return s;
}
#else
    ;
#endif

} // namespace typeflow::compile
