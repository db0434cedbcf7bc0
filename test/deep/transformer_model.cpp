// Issue 43's deep transformer: twelve pre-norm blocks (`ty::transformer_block`: layer norm,
// causal multi-head attention, a gelu MLP) written out one by one, a token embedding, a final
// layer norm and a linear head, the mean cross-entropy and a float32 Adam update over its 150
// variables, compiled with -Wall -Wextra -Wpedantic -Werror (test/CMakeLists.txt). It then
// learns a task that needs attention (each position predicts the token one step back, which
// only the causal attention can see) and fails unless the loss falls below a third of its first
// value, or if the session does not hold the 150 variables.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string_view>
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

namespace {

constexpr std::int64_t vocab = 16, context = 16, width = 32, heads = 2, hidden = 64;
constexpr auto tokens = ty::placeholder<"tokens", std::int32_t, ty::shape<ty::dyn, context>>;
constexpr auto targets = ty::placeholder<"targets", std::int32_t, ty::shape<ty::dyn, context>>;
constexpr auto positions =
    ty::variable<"pos", float, ty::shape<context, width>, ty::normal<0.0, 0.1>>;
constexpr auto h0 = ty::embedding<"tok", vocab, width>(tokens) + positions;
#define TYPEFLOW_BLOCK(i, prev)                                                                    \
  constexpr auto h##i = ty::transformer_block<"block" #i, heads, hidden>(prev);
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
constexpr auto logits = ty::dense<"head", vocab>(ty::layer_norm_layer<"ln_f">(h12));
constexpr auto loss = ty::mean(ty::sparse_softmax_cross_entropy_with_logits(
    ty::reshape<-1, vocab>(logits), ty::reshape<-1>(targets)));
constexpr auto train = ty::adam(ty::constant<0.002>).minimize(loss);

} // namespace

int main() {
  constexpr std::int64_t batch = 16;
  // Random tokens; the target at position t is the token at t - 1 (0 at t = 0).
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::int32_t> token(0, vocab - 1);
  ty::tensor<std::int32_t> xs({batch, context}), ys({batch, context});
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < context; ++t) {
      xs.data()[b * context + t] = token(rng);
      ys.data()[b * context + t] = t == 0 ? 0 : xs.data()[b * context + t - 1];
    }
  ty::session s(ty::session_options{.threads = 2, .seed = 1});
  s.initialize(train);
  // 12 blocks of 12 variables, the token and position embeddings, the final layer norm's two
  // and the head's two; each with Adam's two slots; and Adam's step count.
  std::size_t held = 0, slots = 0;
  s.for_each_variable([&](const ty::variable_entry& v) {
    const bool slot = v.name.ends_with("/adam_m") || v.name.ends_with("/adam_v");
    (slot ? slots : held) += 1;
  });
  if (held != 12 * 12 + 2 + 2 + 2 + 1 || slots != 2 * (12 * 12 + 2 + 2 + 2)) {
    std::printf("FAIL: the session holds %zu variables and %zu Adam slots, not 151 and 300\n", held,
                slots);
    return 1;
  }
  float first = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    auto [l] = s.run(ty::fetch(loss, train), ty::feed(tokens, xs), ty::feed(targets, ys));
    last = l.item();
    if (step == 0)
      first = last;
  }
  std::printf(
      "12-block transformer, %zu variables, %zu Adam slots: loss %.4f -> %.4f after 100 steps\n",
      held, slots, static_cast<double>(first), static_cast<double>(last));
  if (!std::isfinite(first) || std::fabs(first - std::log(static_cast<float>(vocab))) > 1.0f) {
    std::printf("FAIL: the first loss is not near log(vocab) = %.3f\n",
                std::log(static_cast<double>(vocab)));
    return 1;
  }
  if (!std::isfinite(last) || !(last < first / 3)) {
    std::printf("FAIL: the loss did not fall below a third of its first value\n");
    return 1;
  }
  return 0;
}
