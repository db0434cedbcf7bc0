// expect: sparse_softmax_cross_entropy_with_logits: labels need dtype int32 or int64: float32
// Sparse labels are class indices, not floats.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto logits = ty::placeholder<"logits", float, ty::shape<ty::dyn, 10>>;
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
constexpr auto labels = ty::placeholder<"labels", float, ty::shape<ty::dyn>>;
#else
constexpr auto labels = ty::placeholder<"labels", std::int32_t, ty::shape<ty::dyn>>;
#endif

int main() {
  [[maybe_unused]] constexpr auto y = ty::sparse_softmax_cross_entropy_with_logits(logits, labels);
}
