// Context of a docs snippet (scripts/check_snippets.py), at namespace scope: the seed's names
// (images, labels, total_loss, train_op) for a small classifier, and a batch.
inline constexpr auto images = ty::placeholder<"images", float, ty::shape<ty::dyn, 4>>;
inline constexpr auto labels = ty::placeholder<"labels", std::int32_t, ty::shape<ty::dyn>>;
inline constexpr auto total_loss =
    ty::mean(ty::sparse_softmax_cross_entropy_with_logits(ty::dense<"fc", 3>(images), labels));
inline constexpr auto train_op = ty::gradient_descent(ty::constant<0.1>).minimize(total_loss);
inline ty::tensor<float> batch({8, 4});
inline ty::tensor<std::int32_t> y({8});
// @snippet
