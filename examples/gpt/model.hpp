// A character-level decoder-only transformer (GPT-2's layout, small): bytes of text as tokens,
// learned token and position embeddings, pre-norm blocks of causal multi-head attention and a
// gelu MLP, a final layer norm and a linear head, trained by Adam on the next byte's
// cross-entropy. Every piece is one of typeflow's ops or nn/ layers (docs/gpt.md).
#pragma once
#include <cstdint>

#include <typeflow/typeflow.hpp>

namespace gpt {

namespace ty = typeflow;

inline constexpr std::int64_t vocab = 128;  // bytes 0..127 (others map to '?')
inline constexpr std::int64_t context = 32; // tokens per sequence
inline constexpr std::int64_t width = 64;   // model width D
inline constexpr std::int64_t heads = 2;
inline constexpr std::int64_t hidden = 256; // the MLP's width

/// tokens[b, t] and the next byte of each, targets[b, t] = tokens[b, t + 1] of the text.
inline constexpr auto tokens = ty::placeholder<"tokens", std::int32_t, ty::shape<ty::dyn, context>>;
inline constexpr auto targets =
    ty::placeholder<"targets", std::int32_t, ty::shape<ty::dyn, context>>;

inline constexpr auto positions =
    ty::variable<"pos/embeddings", float, ty::shape<context, width>, ty::normal<0.0, 0.02>>;
inline constexpr auto h0 = ty::embedding<"tok", vocab, width>(tokens) + positions;
inline constexpr auto h1 = ty::transformer_block<"block0", heads, hidden>(h0);
inline constexpr auto h2 = ty::transformer_block<"block1", heads, hidden>(h1);
/// [B, T, vocab]: the next byte's logits at every position.
inline constexpr auto logits = ty::dense<"head", vocab>(ty::layer_norm_layer<"ln_f">(h2));

inline constexpr auto loss = ty::mean(ty::sparse_softmax_cross_entropy_with_logits(
    ty::reshape<-1, vocab>(logits), ty::reshape<-1>(targets)));

inline constexpr auto learning_rate = ty::hyperparameter<"learning_rate", float, 3e-3>;
inline constexpr auto train_op = ty::adam(learning_rate).minimize(loss);

} // namespace gpt
