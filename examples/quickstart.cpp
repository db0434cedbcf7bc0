#include <iostream>
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

// The graph is a type: nothing runs here.
constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 3>>;
constexpr auto W = ty::variable<"W", float, ty::shape<3, 2>, ty::fill<0.5>>;
constexpr auto b = ty::variable<"b", float, ty::shape<2>, ty::fill<-1>>;
constexpr auto y = ty::relu(ty::matmul(x, W) + b);
constexpr auto total = ty::sum(y);

int main() {
  std::cout << ty::to_string(y) << "\n";

  ty::session s;
  ty::tensor<float> in({2, 3}, {1, 2, 3, 4, 5, 6});
  auto [out, t] = s.run(ty::fetch(y, total), ty::feed(x, in));
  std::cout << out << "\n"
            << "sum = " << t.item() << "\n";

  // A training-style step: assignments run as one group and persist in the session.
  s.run(ty::fetch(ty::group(ty::assign_add(b, ty::constant<1>))));
  std::cout << "b = " << s.read(b) << "\n";
}
