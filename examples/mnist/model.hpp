// The seed's model (TensorFlow's multi-GPU MNIST tutorial), defined at compile time:
// conv 5x5x32 SAME + bias + relu, max-pool 2x2/2 SAME, conv 5x5x64 SAME + bias + relu, max-pool,
// fully connected 7*7*64 -> 1024 + relu, 1024 -> 10 + relu, linear 10 -> 10; the mean sparse
// softmax cross-entropy plus the losses collection (weight decay on the fully connected
// weights); Momentum 0.9 with Nesterov. Used by examples/mnist/main.cpp and the tests.
#pragma once
#include "typeflow/typeflow.hpp"

namespace mnist {

namespace ty = typeflow;

/// L2 weight decay of the two wide fully connected layers (the losses collection).
inline constexpr double weight_decay = 1e-4;

inline constexpr auto images = ty::placeholder<"images", float, ty::shape<ty::dyn, 28, 28, 1>>;
inline constexpr auto labels = ty::placeholder<"labels", std::int32_t, ty::shape<ty::dyn>>;

// Initializers as the seed's: truncated normal weights, constant biases.
inline constexpr auto conv1 = ty::max_pool<ty::padding::same, 2>(ty::relu(
    ty::conv2d_layer<"conv1", 5, 5, 32, ty::truncated_normal<5e-2>, ty::constant_initializer<0.0>>(
        images)));
inline constexpr auto conv2 = ty::max_pool<ty::padding::same, 2>(ty::relu(
    ty::conv2d_layer<"conv2", 5, 5, 64, ty::truncated_normal<5e-2>, ty::constant_initializer<0.1>>(
        conv1)));
inline constexpr auto local3 =
    ty::relu(ty::dense<"local3", 1024, ty::truncated_normal<0.04>, ty::constant_initializer<0.1>,
                       weight_decay>(ty::reshape<-1, 7 * 7 * 64>(conv2)));
inline constexpr auto local4 =
    ty::relu(ty::dense<"local4", 10, ty::truncated_normal<0.04>, ty::constant_initializer<0.1>,
                       weight_decay>(local3));
inline constexpr auto logits =
    ty::dense<"softmax_linear", 10, ty::truncated_normal<1 / 192.0>, ty::constant_initializer<0.0>>(
        local4);

inline constexpr auto cross_entropy =
    ty::mean(ty::sparse_softmax_cross_entropy_with_logits(logits, labels));
inline constexpr auto total_loss = ty::add_weight_decay(cross_entropy);

inline constexpr auto learning_rate = ty::hyperparameter<"learning_rate", float, 0.01>;
inline constexpr auto optimizer = ty::momentum(learning_rate, ty::constant<0.9>, ty::nesterov);
inline constexpr auto train_op = optimizer.minimize(total_loss);

/// The predicted class of each image.
inline constexpr auto predictions = ty::argmax<1>(logits);

} // namespace mnist
