// examples/resnet: a small residual network with batch norm for Fashion-MNIST (28x28x1, 10
// classes), defined at compile time. ResNet's CIFAR layout (He et al. 2015, section 4.2) at two
// blocks per stage (ResNet-14): a 3x3 convolution of 16 filters with batch norm and relu, then two
// basic residual blocks each of 16, 32 (the first with stride 2) and 64 (the first with stride 2)
// filters, global average pooling and a dense layer
// to the 10 logits. Every batch norm normalizes by its batch when training and by its moving
// averages when testing: the model is a function template over ty::mode, built twice, with one set
// of variables (shared by name). Adam; the training op also updates the moving averages.
#pragma once
#include "typeflow/typeflow.hpp"

namespace resnet {

namespace ty = typeflow;

inline constexpr auto images = ty::placeholder<"images", float, ty::shape<ty::dyn, 28, 28, 1>>;
inline constexpr auto labels = ty::placeholder<"labels", std::int32_t, ty::shape<ty::dyn>>;

/// The logits [N, 10] of images [N, 28, 28, 1], with batch norm in mode M.
template <ty::mode M>
consteval auto logits_of() {
  const auto stem =
      ty::relu(ty::batch_norm_layer<"stem/bn", M>(ty::conv2d_no_bias<"stem/conv", 3, 16>(images)));
  const auto s1 = ty::residual_block<"res1b", 16, 1, M>(
      ty::residual_block<"res1", 16, 1, M>(stem)); // [N, 28, 28, 16]
  const auto s2 = ty::residual_block<"res2b", 32, 1, M>(
      ty::residual_block<"res2", 32, 2, M>(s1)); // [N, 14, 14, 32]
  const auto s3 = ty::residual_block<"res3b", 64, 1, M>(
      ty::residual_block<"res3", 64, 2, M>(s2));  // [N, 7, 7, 64]
  return ty::dense<"fc", 10>(ty::mean<1, 2>(s3)); // global average pool
}

inline constexpr auto logits = logits_of<ty::mode::training>();
inline constexpr auto loss = ty::mean(ty::sparse_softmax_cross_entropy_with_logits(logits, labels));

inline constexpr auto learning_rate = ty::hyperparameter<"learning_rate", float, 0.002>;
inline constexpr auto train_op = ty::adam(learning_rate).minimize(loss);

/// The predicted class of each image, from the moving averages (inference mode).
inline constexpr auto predictions = ty::argmax<1>(logits_of<ty::mode::inference>());

} // namespace resnet
