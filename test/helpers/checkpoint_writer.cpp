// Helper of unit.checkpoint's kill test: saves a checkpoint of one variable over and over, the
// n-th save holding the value FIRST + n - 1 in every element, until it is killed.
//   checkpoint_writer FILE FIRST
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <typeflow/io/checkpoint.hpp>
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: checkpoint_writer FILE FIRST\n");
    return 2;
  }
  constexpr auto big = ty::variable<"big", float, ty::shape<1 << 20>>;
  ty::session<> s(ty::session_options{.threads = 1});
  s.initialize(big);
  ty::tensor<float> value({1 << 20});
  for (std::int64_t n = std::atoll(argv[2]);; ++n) {
    for (auto& e : value)
      e = static_cast<float>(n);
    s.write(big, value);
    ty::save_checkpoint(s, argv[1]);
  }
}
