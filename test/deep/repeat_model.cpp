// Issue 15's deep model with the layer-repeat combinator: the residual MLP
// `h = h + relu(dense<64>(h))` 50 blocks deep as one ty::repeat (its variables stacked, e.g.
// `block/dense/weights` [50, 64, 64]), a one-unit head, the gradient and a float32 Adam update,
// built as the strictest user builds it (-Wall -Wextra -Wpedantic -Werror, test/CMakeLists.txt;
// clang 19 checks the same source). It then trains on a fixed regression problem and fails
// unless the loss halves.
#include <cstdint>
#include <cstdio>
#include <typeflow/typeflow.hpp>
#include <vector>

#include "train_check.hpp"

namespace ty = typeflow;

namespace {

constexpr std::int64_t depth = 50;
using init = ty::uniform<-0.02, 0.02>;
constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 64>>;
constexpr auto y = ty::placeholder<"y", float, ty::shape<ty::dyn, 1>>;
constexpr auto h = ty::repeat<depth, "block">(
    [](auto h) { return h + ty::relu(ty::dense<"dense", 64, init>(h)); }, x);
constexpr auto prediction = ty::dense<"head", 1, ty::uniform<-0.05, 0.05>>(h);
constexpr auto loss = ty::mean(ty::square(prediction - y));
constexpr auto train = ty::adam(ty::constant<0.002>).minimize(loss);
static_assert(std::is_same_v<decltype(loss)::value_type, float>);

} // namespace

int main() {
  return ::train_and_check("residual MLP, ty::repeat of depth 50, float32 Adam", loss, train, x, y,
                           [](auto& s) {
                             const auto w = s.read(ty::find_variable<"block/dense/weights">(h));
                             if (w.shape() == std::vector<std::int64_t>{depth, 64, 64})
                               return true;
                             std::printf("FAIL: block/dense/weights is not [50, 64, 64]\n");
                             return false;
                           });
}
