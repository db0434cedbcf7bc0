// Context of a docs snippet (scripts/check_snippets.py): a classifier's loss, accuracy-like
// metric and training op, its placeholders and a batch.
constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 4>>;
constexpr auto y = ty::placeholder<"y", std::int32_t, ty::shape<ty::dyn>>;
constexpr auto logits = ty::dense<"fc", 3>(x);
constexpr auto loss_expr = ty::mean(ty::sparse_softmax_cross_entropy_with_logits(logits, y));
constexpr auto acc_expr = ty::mean(ty::softmax(logits));
constexpr auto train_op = ty::gradient_descent(ty::constant<0.1>).minimize(loss_expr);
inline void snippet(ty::tensor<float>& images, ty::tensor<std::int32_t>& labels) {
  // @snippet
}
