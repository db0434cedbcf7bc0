// expect: grad: cannot differentiate with respect to \\?"labels\\?" of dtype int32
// Gradients exist only with respect to floating-point tensors.
#include <typeflow/typeflow.hpp> // first: the precompiled header covers a first include

#include <cstdint>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 3>>;
constexpr auto labels = ty::placeholder<"labels", std::int32_t, ty::shape<ty::dyn, 3>>;
constexpr auto loss = ty::sum(x * ty::cast<float>(labels));

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto g = ty::grad(loss, labels);
#else
  [[maybe_unused]] constexpr auto g = ty::grad(loss, x);
#endif
}
