// matmul: 2-D, batched (equal leading batch extents), and a batch times one matrix
// ([..., m, k] x [k, n], np.matmul's broadcast), with transpose flags.
#pragma once
#include <string>

#include "../graph/node.hpp"

namespace typeflow {
namespace ops {

template <bool TA, bool TB>
struct matmul {
  static constexpr node_kind kind = node_kind::matmul;
  static constexpr std::string_view name = "matmul";
  static constexpr epilogue_role epilogue = epilogue_role::producer;
  static constexpr bool follows_precision = true; // graph/node.hpp
  static constexpr bool transpose_a = TA, transpose_b = TB;
  template <class A, class B>
  using value_type = typename A::value_type;
  template <class A, class B>
  static constexpr std::string_view dtype_error() {
    if (!std::is_same_v<typename A::value_type, typename B::value_type>)
      return "operand dtypes differ";
    if (std::is_same_v<typename A::value_type, bool>)
      return "arithmetic on bool";
    return {};
  }
  template <std::size_t RA, std::size_t RB>
  static constexpr rule_result<RA> rule(const dims_t<RA>& a, const dims_t<RB>& b) {
    rule_result<RA> r;
    if (RA < 2 || RB < 2) {
      r.error = "operands must have rank 2 or more";
      return r;
    }
    if constexpr (RB == 2 && RA > 2 && !TA) {
      // [..., m, k] x [k, n]: the leading extents of a fold into the rows (np.matmul's
      // broadcast of a matrix over a batch); the matrix's extents must be static, so that the
      // gradient can fold the batch away (matmul_grad.hpp)
      if (b[0] == dyn || b[1] == dyn) {
        r.error = "broadcasting a matrix over a batch needs its extents static";
        return r;
      }
      for (std::size_t i = 0; i + 1 < RA; ++i)
        r.dims[i] = a[i];
      const std::int64_t ka = a[RA - 1], kb = TB ? b[1] : b[0];
      if (ka != kb && ka != dyn)
        r.error = "inner dimensions differ";
      r.dims[RA - 1] = TB ? b[0] : b[1];
      return r;
    } else if constexpr (RA != RB) {
      r.error = "ranks differ";
      return r;
    } else {
      return same_rank_rule(a, b, r);
    }
  }
  template <std::size_t R>
  static constexpr rule_result<R> same_rank_rule(const dims_t<R>& a, const dims_t<R>& b,
                                                 rule_result<R> r) {
    constexpr std::size_t RA = R, RB = R;
    for (std::size_t i = 0; i + 2 < RA; ++i) {
      if (a[i] != b[i] && a[i] != dyn && b[i] != dyn) {
        r.error = "batch dimensions differ";
        return r;
      }
      r.dims[i] = a[i] == dyn ? b[i] : a[i];
    }
    const std::int64_t m = TA ? a[RA - 1] : a[RA - 2], ka = TA ? a[RA - 2] : a[RA - 1];
    const std::int64_t kb = TB ? b[RB - 1] : b[RB - 2], n = TB ? b[RB - 2] : b[RB - 1];
    if (ka != kb && ka != dyn && kb != dyn)
      r.error = "inner dimensions differ";
    r.dims[RA - 2] = m;
    r.dims[RA - 1] = n;
    return r;
  }
  static constexpr void attrs_message(detail::msg_buf& b) {
    if (TA)
      b << std::string_view(" (transpose_a)");
    if (TB)
      b << std::string_view(" (transpose_b)");
  }
  static std::string attrs() {
    return std::string(TA ? "transpose_a" : "") + (TA && TB ? ", " : "") +
           (TB ? "transpose_b" : "");
  }
};

} // namespace ops

/// matmul<transpose_a, transpose_b>(a, b): [..., m, k] x [..., k, n] -> [..., m, n] (equal batch
/// extents), or [..., k] x [k, n] -> [..., n] (a matrix with static extents applied to every row
/// of a batch, as np.matmul and tf.matmul broadcast it; a not transposed).
template <bool TA = false, bool TB = false, expression A, expression B>
consteval auto matmul(A, B) {
  return make_node<ops::matmul<TA, TB>, A, B>();
}

} // namespace typeflow
