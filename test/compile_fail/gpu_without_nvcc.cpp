// expect: session: op w is placed on GPU:0, which has no backend here
// a translation unit compiled by nvcc A session placing ops on a GPU in a translation unit that g++
// compiles: placement is the same as under nvcc (matmul has a GPU kernel), and running it needs the
// CUDA backend, which only nvcc compiles. (Before, such a plan silently ran everything on the CPU
// in g++ translation units.)
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<2, 3>>;
constexpr auto w = ty::variable<"w", float, ty::shape<3, 4>>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  ty::session<ty::on<ty::gpu<0>>> s;
#else
  ty::session<ty::on<ty::cpu<0>>> s;
#endif
  auto [y] = s.run(ty::fetch(ty::matmul(x, w)), ty::feed(x, ty::tensor<float>({2, 3})));
  return y.size() == 8 ? 0 : 1;
}
