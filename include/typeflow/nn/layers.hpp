// Layer helpers that create named variables as the seed's _variable_on_cpu does: a layer named
// "conv1" owns "conv1/weights" and "conv1/biases". The variables' types carry their initializer
// and attributes, so the same layer written twice is the same variable (shared by name).
#pragma once
#include "../ops/attention.hpp"
#include "../ops/index.hpp"
#include "../ops/layout.hpp"
#include "../ops/matmul.hpp"
#include "../ops/nn.hpp"
#include "../ops/norm.hpp"
#include "initializers.hpp"

namespace typeflow {

namespace detail {
template <std::uint64_t DecayBits, class Init>
struct decayed {
  using type = weight_decay_bits<DecayBits, Init>;
};
template <class Init>
struct decayed<0, Init> { // bits of +0.0
  using type = Init;
};
} // namespace detail

/// The weights variable of a layer: `Name/weights`, optionally with weight decay.
template <fixed_string Name, dtype T, class Shape, class Init, auto Decay = 0.0>
inline constexpr auto layer_weights =
    variable<Name + fixed_string("/weights"), T, Shape,
             typename detail::decayed<detail::bits<Decay>, Init>::type>;
/// The biases variable of a layer: `Name/biases`.
template <fixed_string Name, dtype T, std::int64_t N, class Init>
inline constexpr auto layer_biases = variable<Name + fixed_string("/biases"), T, shape<N>, Init>;

/// dense<"local3", 1024>(x): x [..., in] times `Name/weights` [in, Units] plus `Name/biases`
/// (no activation). The input's last extent must be static.
template <fixed_string Name, std::int64_t Units, class WInit = glorot_uniform, class BInit = zeros,
          auto Decay = 0.0, expression X>
consteval auto dense(X x) {
  if constexpr (any_invalid<X>) { // an earlier mistake, reported already
    return invalid_expr{};
  } else {
    using T = typename X::value_type;
    static_assert(X::shape_type::rank > 0, "dense: the input is a scalar");
    constexpr std::int64_t in = X::shape_type::dims[X::shape_type::rank - 1];
    static_assert(in != dyn, "dense: the input's last extent must be static");
    return typeflow::bias_add(
        typeflow::matmul(x, layer_weights<Name, T, shape<in, Units>, WInit, Decay>),
        layer_biases<Name, T, Units, BInit>);
  }
}

/// conv2d_layer<"conv1", 5, 5, 32>(x): conv2d of x [N, H, W, C] with `Name/weights`
/// [KH, KW, C, Filters] plus `Name/biases` (no activation).
template <fixed_string Name, std::int64_t KH, std::int64_t KW, std::int64_t Filters,
          class WInit = glorot_uniform, class BInit = zeros, auto Decay = 0.0,
          padding P = padding::same, std::int64_t Stride = 1, expression X>
consteval auto conv2d_layer(X x) {
  if constexpr (any_invalid<X>) { // an earlier mistake, reported already
    return invalid_expr{};
  } else {
    using T = typename X::value_type;
    static_assert(X::shape_type::rank == 4, "conv2d_layer: the input is not [N, H, W, C]");
    constexpr std::int64_t c = X::shape_type::dims[X::shape_type::rank - 1];
    static_assert(c != dyn, "conv2d_layer: the input's channel extent must be static");
    return typeflow::bias_add(
        typeflow::conv2d<P, Stride, Stride>(
            x, layer_weights<Name, T, shape<KH, KW, c, Filters>, WInit, Decay>),
        layer_biases<Name, T, Filters, BInit>);
  }
}

/// layer_norm_layer<"ln1">(x): layer_norm over the last axis of x [..., D] with `Name/gamma`
/// (ones) and `Name/beta` (zeros), both [D]; eps as layer_norm's.
template <fixed_string Name, auto Eps = 1e-5, expression X>
consteval auto layer_norm_layer(X x) {
  if constexpr (any_invalid<X>) { // an earlier mistake, reported already
    return invalid_expr{};
  } else {
    using T = typename X::value_type;
    static_assert(X::shape_type::rank > 0, "layer_norm_layer: the input is a scalar");
    constexpr std::int64_t d = X::shape_type::dims[X::shape_type::rank - 1];
    static_assert(d != dyn, "layer_norm_layer: the input's last extent must be static");
    return typeflow::layer_norm<Eps>(x, variable<Name + fixed_string("/gamma"), T, shape<d>, ones>,
                                     variable<Name + fixed_string("/beta"), T, shape<d>, zeros>);
  }
}

/// Whether a layer is built for a training step or for inference (batch norm's statistics: the
/// batch's, or the moving averages). A model is usually a function template over it, built
/// twice: `model<ty::mode::training>(x)` for the loss, `model<ty::mode::inference>(x)` to test.
enum class mode { training, inference };

/// batch_norm_layer<"bn1", mode>(x): batch norm over every axis of x [..., C] but the last (the
/// channels of NHWC), with `Name/gamma` (ones), `Name/beta` (zeros), and the moving averages
/// `Name/moving_mean` (zeros) and `Name/moving_variance` (ones), not trainable, checkpointed
/// with the rest. Training: the batch's moments, and every training step updates the moving
/// averages (decay 0.9, eps 1e-5: PyTorch's BatchNorm2d). Inference: the moving averages, as one
/// elementwise loop that fuses with its neighbours.
template <fixed_string Name, mode M, auto Eps = 1e-5, auto Decay = 0.9, expression X>
consteval auto batch_norm_layer(X x) {
  if constexpr (any_invalid<X>) { // an earlier mistake, reported already
    return invalid_expr{};
  } else {
    using T = typename X::value_type;
    static_assert(X::shape_type::rank >= 2, "batch_norm_layer: the input needs rank 2 or more");
    constexpr std::int64_t c = X::shape_type::dims[X::shape_type::rank - 1];
    static_assert(c != dyn, "batch_norm_layer: the input's channel extent must be static");
    constexpr auto gamma = variable<Name + fixed_string("/gamma"), T, shape<c>, ones>;
    constexpr auto beta = variable<Name + fixed_string("/beta"), T, shape<c>, zeros>;
    constexpr auto mean =
        variable<Name + fixed_string("/moving_mean"), T, shape<c>, not_trainable<zeros>>;
    constexpr auto var =
        variable<Name + fixed_string("/moving_variance"), T, shape<c>, not_trainable<ones>>;
    if constexpr (M == mode::training)
      return typeflow::batch_norm<Eps, Decay>(x, gamma, beta, mean, var);
    else
      return typeflow::add(
          typeflow::mul(typeflow::mul(typeflow::sub(x, mean),
                                      typeflow::rsqrt(typeflow::add(var, constant<Eps>))),
                        gamma),
          beta);
  }
}

/// conv2d of x [N, H, W, C] with `Name/weights` [K, K, C, Filters] (he_normal), no bias: the
/// convolution of a residual net, whose batch norm supplies the shift.
template <fixed_string Name, std::int64_t K, std::int64_t Filters, std::int64_t Stride = 1,
          expression X>
consteval auto conv2d_no_bias(X x) {
  using T = typename X::value_type;
  static_assert(X::shape_type::rank == 4, "conv2d_no_bias: the input is not [N, H, W, C]");
  constexpr std::int64_t c = X::shape_type::dims[3];
  static_assert(c != dyn, "conv2d_no_bias: the input's channel extent must be static");
  return typeflow::conv2d<padding::same, Stride, Stride>(
      x, layer_weights<Name, T, shape<K, K, c, Filters>, he_normal>);
}

/// residual_block<"res1", filters, stride, mode>(x [N, H, W, C]): ResNet's basic block (He et
/// al. 2015, v1): relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut), 3x3 convolutions without
/// bias, the first with the stride; the shortcut is x itself, or a strided 1x1 convolution and
/// batch norm where the stride or the channels change. Variables under `Name/` (conv1, bn1,
/// conv2, bn2, and shortcut, shortcut_bn).
template <fixed_string Name, std::int64_t Filters, std::int64_t Stride, mode M, expression X>
consteval auto residual_block(X x) {
  if constexpr (any_invalid<X>) { // an earlier mistake, reported already
    return invalid_expr{};
  } else {
    const auto h = typeflow::relu(batch_norm_layer<Name + fixed_string("/bn1"), M>(
        conv2d_no_bias<Name + fixed_string("/conv1"), 3, Filters, Stride>(x)));
    const auto y = batch_norm_layer<Name + fixed_string("/bn2"), M>(
        conv2d_no_bias<Name + fixed_string("/conv2"), 3, Filters>(h));
    if constexpr (Stride == 1 && X::shape_type::dims[3] == Filters)
      return typeflow::relu(typeflow::add(y, x));
    else
      return typeflow::relu(typeflow::add(
          y, batch_norm_layer<Name + fixed_string("/shortcut_bn"), M>(
                 conv2d_no_bias<Name + fixed_string("/shortcut"), 1, Filters, Stride>(x))));
  }
}

/// embedding<"tok", vocab, dim>(ids): rows of `Name/embeddings` [vocab, dim] picked by integer
/// ids [...], giving [..., dim] (tf.nn.embedding_lookup); normal(0, 0.02) as GPT-2's.
template <fixed_string Name, std::int64_t Vocab, std::int64_t Dim, dtype T = float,
          class Init = normal<0.0, 0.02>, expression Ids>
consteval auto embedding(Ids ids) {
  return typeflow::gather(variable<Name + fixed_string("/embeddings"), T, shape<Vocab, Dim>, Init>,
                          ids);
}

namespace detail {
/// [B, T, H * Dh] -> [B, H, T, Dh]
template <std::int64_t T, std::int64_t H, std::int64_t Dh, expression X>
consteval auto split_heads(X x) {
  return typeflow::transpose<0, 2, 1, 3>(typeflow::reshape<-1, T, H, Dh>(x));
}
/// [B, H, T, Dh] -> [B, T, H * Dh]
template <std::int64_t T, std::int64_t H, std::int64_t Dh, expression X>
consteval auto merge_heads(X x) {
  return typeflow::reshape<-1, T, H * Dh>(typeflow::transpose<0, 2, 1, 3>(x));
}
} // namespace detail

/// multi_head_attention<"attn", heads, causal>(x [B, T, D]): one dense layer `Name/qkv` to
/// [B, T, 3D], split into q, k, v of `heads` heads each (D / heads features), the attention op
/// per head, the heads merged and projected by `Name/proj` [D, D]. T and D must be static.
/// Drop: dropout on the attention's probabilities (attention_dropout; none by default).
template <fixed_string Name, std::int64_t Heads, bool Causal = true,
          attention_dropout Drop = attention_dropout{}, expression X>
consteval auto multi_head_attention(X x) {
  if constexpr (any_invalid<X>) { // an earlier mistake, reported already
    return invalid_expr{};
  } else {
    static_assert(X::shape_type::rank == 3, "multi_head_attention: the input is not [B, T, D]");
    constexpr std::int64_t t = X::shape_type::dims[1], d = X::shape_type::dims[2];
    static_assert(t != dyn && d != dyn, "multi_head_attention: T and D must be static");
    static_assert(d % Heads == 0, "multi_head_attention: D is not divisible by the heads");
    constexpr std::int64_t dh = d / Heads;
    const auto [q, k, v] = typeflow::split<-1, 3>(dense<Name + fixed_string("/qkv"), 3 * d>(x));
    const auto o = typeflow::attention<Causal, Drop>(detail::split_heads<t, Heads, dh>(q),
                                                     detail::split_heads<t, Heads, dh>(k),
                                                     detail::split_heads<t, Heads, dh>(v));
    return dense<Name + fixed_string("/proj"), d>(detail::merge_heads<t, Heads, dh>(o));
  }
}

/// transformer_block<"b1", heads, hidden>(x [B, T, D]): GPT-2's pre-norm block,
/// h = x + attn(ln1(x)); h + mlp(ln2(h)) with mlp = dense(hidden), gelu, dense(D); causal
/// attention (Drop: dropout on its probabilities, as multi_head_attention). Variables under
/// `Name/` (ln1, attn, ln2, fc, out).
template <fixed_string Name, std::int64_t Heads, std::int64_t Hidden, bool Causal = true,
          attention_dropout Drop = attention_dropout{}, expression X>
consteval auto transformer_block(X x) {
  if constexpr (any_invalid<X>) { // an earlier mistake, reported already
    return invalid_expr{};
  } else {
    constexpr std::int64_t d = X::shape_type::dims[X::shape_type::rank - 1];
    const auto h = x + multi_head_attention<Name + fixed_string("/attn"), Heads, Causal, Drop>(
                           layer_norm_layer<Name + fixed_string("/ln1")>(x));
    const auto m = dense<Name + fixed_string("/out"), d>(
        typeflow::gelu(dense<Name + fixed_string("/fc"), Hidden>(
            layer_norm_layer<Name + fixed_string("/ln2")>(h))));
    return h + m;
  }
}

} // namespace typeflow
