// matmul: 2-D and batched, the batch dimensions broadcast as np.matmul's ([..., m, k] x [k, n],
// [b, h, t, d] x [1, h, d, t]), with transpose flags.
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
  /// The batch dimensions (all but the last two) broadcast as np.matmul's: aligned from the
  /// right, an absent one or an extent of 1 stretched to the other operand's. A dyn extent
  /// against a static n is n (the rule runs again on the fed extents: 1 is stretched, another
  /// extent than n is an error), against 1 or dyn it stays dyn.
  template <std::size_t RA, std::size_t RB>
  static constexpr rule_result<(RA > RB ? RA : RB)> rule(const dims_t<RA>& a, const dims_t<RB>& b) {
    constexpr std::size_t R = RA > RB ? RA : RB;
    rule_result<R> r;
    if (RA < 2 || RB < 2) {
      r.error = "operands must have rank 2 or more";
      return r;
    }
    for (std::size_t i = 0; i + 2 < R; ++i) {
      const std::int64_t ea = i + RA < R ? 1 : a[i + RA - R], eb = i + RB < R ? 1 : b[i + RB - R];
      if (ea == eb || eb == 1 || eb == dyn) {
        r.dims[i] = ea == 1 ? eb : ea;
      } else if (ea == 1 || ea == dyn) {
        r.dims[i] = eb;
      } else {
        r.error = "batch dimensions differ";
        return r;
      }
    }
    const std::int64_t m = TA ? a[RA - 1] : a[RA - 2], ka = TA ? a[RA - 2] : a[RA - 1];
    const std::int64_t kb = TB ? b[RB - 1] : b[RB - 2], n = TB ? b[RB - 2] : b[RB - 1];
    if (ka != kb && ka != dyn && kb != dyn)
      r.error = "inner dimensions differ";
    r.dims[R - 2] = m;
    r.dims[R - 1] = n;
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

/// matmul<transpose_a, transpose_b>(a, b): [..., m, k] x [..., k, n] -> [..., m, n], the batch
/// dimensions `...` broadcast as np.matmul and tf.matmul broadcast them: [b, t, k] x [k, n] ->
/// [b, t, n], [b, h, t, d] x [1, h, d, t] -> [b, h, t, t], [h, m, k] x [b, 1, k, n] -> [b, h, m,
/// n].
template <bool TA = false, bool TB = false, expression A, expression B>
consteval auto matmul(A, B) {
  return make_node<ops::matmul<TA, TB>, A, B>();
}

} // namespace typeflow
