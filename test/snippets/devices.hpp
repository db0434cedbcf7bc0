// Context of a docs snippet (scripts/check_snippets.py): a model with a training op.
constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 4>>;
constexpr auto w = ty::variable<"w", float, ty::shape<4, 4>>;
constexpr auto loss = ty::mean(ty::square(ty::matmul(x, w)));
constexpr auto train = ty::gradient_descent(ty::constant<0.1>).minimize(loss);
inline void snippet() {
  // @snippet
}
