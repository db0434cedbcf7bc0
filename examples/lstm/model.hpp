// A character-level LSTM: bytes of text as tokens, a learned embedding, one LSTM layer
// (nn/recurrent.hpp: ty::lstm, one op over the whole sequence; ty::lstm_scan is the same layer as
// a ty::scan of the cell) and a linear head, trained by Adam on the next byte's cross-entropy, on
// the same corpus as examples/gpt (docs/lstm.md).
#pragma once
#include <cstdint>

#include <typeflow/typeflow.hpp>

namespace lstm {

namespace ty = typeflow;

inline constexpr std::int64_t vocab = 128;  // bytes 0..127 (others map to '?')
inline constexpr std::int64_t context = 64; // tokens per sequence (the scan's steps)
inline constexpr std::int64_t embed = 32;   // the embedding's width
inline constexpr std::int64_t units = 256;  // the LSTM's width

/// tokens[b, t] and the next byte of each, targets[b, t] = tokens[b, t + 1] of the text.
inline constexpr auto tokens = ty::placeholder<"tokens", std::int32_t, ty::shape<ty::dyn, context>>;
inline constexpr auto targets =
    ty::placeholder<"targets", std::int32_t, ty::shape<ty::dyn, context>>;

/// [B, T, units]: the LSTM's h at every step, from a zero state.
inline constexpr auto hidden = ty::lstm<"lstm", units>(ty::embedding<"tok", vocab, embed>(tokens));
/// [B, T, vocab]: the next byte's logits at every position.
inline constexpr auto logits = ty::dense<"head", vocab>(hidden);

inline constexpr auto loss = ty::mean(ty::sparse_softmax_cross_entropy_with_logits(
    ty::reshape<-1, vocab>(logits), ty::reshape<-1>(targets)));

inline constexpr auto learning_rate = ty::hyperparameter<"learning_rate", float, 3e-3>;
inline constexpr auto train_op = ty::adam(learning_rate).minimize(loss);

} // namespace lstm
