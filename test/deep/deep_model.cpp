// A deep model built the way a user with the strictest warnings builds it: a residual MLP,
// `h = h + relu(dense<64>(h))` written out DEPTH times, its gradient and a float32 Adam update,
// compiled with -Wall -Wextra -Wpedantic -Werror (test/CMakeLists.txt). It then trains on a
// fixed regression problem and fails unless the loss falls.
#include <cstdint>
#include <cstdio>
#include <typeflow/typeflow.hpp>
#include <vector>

#include "train_check.hpp"

namespace ty = typeflow;

namespace {

using init = ty::uniform<-0.05, 0.05>;
constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 64>>;
constexpr auto y = ty::placeholder<"y", float, ty::shape<ty::dyn, 1>>;
constexpr auto h0 = x;
#define TYPEFLOW_BLOCK(i, prev)                                                                    \
  constexpr auto h##i = prev + ty::relu(ty::dense<"block" #i, 64, init>(prev));
TYPEFLOW_BLOCK(1, h0)
TYPEFLOW_BLOCK(2, h1)
TYPEFLOW_BLOCK(3, h2)
TYPEFLOW_BLOCK(4, h3)
TYPEFLOW_BLOCK(5, h4)
TYPEFLOW_BLOCK(6, h5)
TYPEFLOW_BLOCK(7, h6)
TYPEFLOW_BLOCK(8, h7)
TYPEFLOW_BLOCK(9, h8)
TYPEFLOW_BLOCK(10, h9)
TYPEFLOW_BLOCK(11, h10)
TYPEFLOW_BLOCK(12, h11)
#undef TYPEFLOW_BLOCK
constexpr auto prediction = ty::dense<"head", 1, init>(h12);
constexpr auto loss = ty::mean(ty::square(prediction - y));
constexpr auto train = ty::adam(ty::constant<0.003>).minimize(loss);
static_assert(std::is_same_v<decltype(loss)::value_type, float>);

} // namespace

int main() {
  return ::train_and_check("residual MLP, depth 12, float32 Adam", loss, train, x, y,
                           [](auto&) { return true; });
}
