// expect: fused CPU loop: elementwise op cube has no vector form: add batch_op<cube>
// A user's elementwise op without a vector form (backend/cpu/simd.hpp's batch_op) would turn its
// whole fused region into a scalar loop: that is a compile error unless the op says it is
// scalar-only.
#include <typeflow/typeflow.hpp> // first: the precompiled header covers a first include

#include <string_view>

namespace ty = typeflow;

struct cube_op : ty::ops::elementwise_base, ty::no_dtype_rule {
  static constexpr std::string_view name = "cube";
#ifdef TYPEFLOW_COMPILE_FAIL_CONTROL
  static constexpr bool scalar_only = true;
#endif
  template <class A>
  using value_type = typename A::value_type;
  template <class C, class A>
  static A eval(A a) {
    return a * a * a;
  }
};

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn>>;
constexpr auto y = ty::make_node<cube_op, std::remove_const_t<decltype(x)>>() + x;

int main() {
  ty::session s;
  ty::tensor<float> t({4});
  auto [r] = s.run(ty::fetch(y), ty::feed(x, t));
  return r.size() == 4 ? 0 : 1;
}
