#include <iostream>
#include <typeflow/typeflow.hpp>
namespace ty = typeflow;
int main() {
  constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 3>>;
  constexpr auto w = ty::variable<"w", float, ty::shape<3>, ty::fill<2.0>>;
  constexpr auto y = ty::sum(x * w);
  ty::session s;
  ty::tensor<float> in({2, 3}, {1, 2, 3, 4, 5, 6});
  auto [r] = s.run(ty::fetch(y), ty::feed(x, in));
  if (r.item() != 42.0f) {
    std::cerr << "consumer: wrong result " << r.item() << "\n";
    return 1;
  }
  std::cout << "consumer ok: " << r.item() << "\n";
}
