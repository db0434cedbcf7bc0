// expect: loss_scaled: the loss must be float32 or float64
// Loss scaling of a float16 loss: the scale (2^16) is infinite in float16. The loss and the
// master weights stay float32 or float64; float16 products come from session_options::precision.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<4>>;
constexpr auto w = ty::variable<"w", float, ty::shape<4>, ty::fill<0.5>>;
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
constexpr auto loss = ty::cast<ty::float16>(ty::sum(ty::mul(w, x)));
#else
constexpr auto loss = ty::sum(ty::mul(w, x));
#endif

int main() {
  [[maybe_unused]] constexpr auto train =
      ty::loss_scaled(ty::gradient_descent(ty::constant<0.1>)).minimize(loss);
}
