// expect: exp: requires a floating-point dtype: int32
// exp is defined on floating-point tensors only.
#include <typeflow/typeflow.hpp> // first: the precompiled header covers a first include

#include <cstdint>

namespace ty = typeflow;

constexpr auto i = ty::placeholder<"i", std::int32_t, ty::shape<ty::dyn>>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto y = ty::exp(i);
#else
  [[maybe_unused]] constexpr auto y = ty::exp(ty::cast<float>(i));
#endif
}
