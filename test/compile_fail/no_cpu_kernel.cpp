// expect: session: op mystery is placed on the CPU but has no CPU kernel
// An op with no kernel in backend/cpu/kernels/ placed on the CPU: whether the CPU backend has a
// kernel is derived from the kernel's existence, and its absence names the op.
#include <typeflow/typeflow.hpp> // first: the precompiled header covers a first include

#include <cstdint>
#include <string_view>

namespace ty = typeflow;

struct mystery_op : ty::no_dtype_rule {
  static constexpr std::string_view name = "mystery";
  static constexpr ty::node_kind kind = ty::node_kind::nn;
  template <class A>
  using value_type = typename A::value_type;
  template <std::size_t R>
  static constexpr ty::rule_result<R> rule(const ty::dims_t<R>& d) {
    ty::rule_result<R> r;
    r.dims = d;
    return r;
  }
};

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn>>;
constexpr auto y = ty::make_node<mystery_op, std::remove_const_t<decltype(x)>>();

int main() {
  ty::session s;
  ty::tensor<float> t({4});
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  auto [r] = s.run(ty::fetch(y), ty::feed(x, t));
#else
  auto [r] = s.run(ty::fetch(ty::relu(x)), ty::feed(x, t));
  (void)y;
#endif
  return r.size() == 4 ? 0 : 1;
}
