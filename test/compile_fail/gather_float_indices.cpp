// expect: gather: indices need dtype int32 or int64
// An embedding lookup by float token ids: gather's indices must be integers.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto embedding = ty::variable<"embedding", float, ty::shape<86, 64>>;
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
constexpr auto tokens = ty::placeholder<"tokens", float, ty::shape<ty::dyn, 32>>;
#else
constexpr auto tokens = ty::placeholder<"tokens", std::int32_t, ty::shape<ty::dyn, 32>>;
#endif

int main() {
  [[maybe_unused]] constexpr auto x = ty::gather(embedding, tokens);
}
