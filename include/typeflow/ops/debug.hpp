// Instrumentation: probe<"tag">(x) is x, and counts how many elements it computed.
#pragma once
#include <atomic>
#include <cstdint>

#include "elementwise.hpp"

namespace typeflow {
namespace debug {

namespace detail {
template <class Tag>
inline std::atomic<std::int64_t> probe_counter{0};
}

/// Elements computed so far by every probe<Tag>.
template <fixed_string Tag>
inline std::atomic<std::int64_t>& probe_count = detail::probe_counter<name_t<Tag>>;

/// Tag is a static_name (see name_t).
template <class Tag>
struct probe_op : ops::elementwise_base, no_dtype_rule {
  static constexpr std::string_view name = "probe";
  /// Counts each element with an atomic: no vector form (backend/cpu/simd.hpp).
  static constexpr bool scalar_only = true;
  /// ... on the host: no GPU kernel (soft placement runs it on cpu<0>).
  static constexpr bool host_only = true;
  template <class A>
  using value_type = typename A::value_type;
  static std::string attrs() { return "\"" + std::string(Tag::view()) + "\""; }
  template <class C, class A>
  static A eval(A a) { // host only: it counts in a host atomic (no GPU kernel)
    detail::probe_counter<Tag>.fetch_add(1, std::memory_order_relaxed);
    return a;
  }
};

/// probe<"tag">(x): identity that counts evaluations per element (for tests and debugging).
template <fixed_string Tag, expression A>
consteval auto probe(A) {
  return make_node<probe_op<name_t<Tag>>, A>();
}

} // namespace debug
} // namespace typeflow
