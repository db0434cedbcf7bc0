// Context of a docs snippet (scripts/check_snippets.py): a small model x -> W, b -> loss, a
// session and a batch; the snippet is the body of a function, so it may shadow these names.
constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 3>>;
constexpr auto W = ty::variable<"W", float, ty::shape<3, 2>>;
constexpr auto b = ty::variable<"b", float, ty::shape<2>>;
constexpr auto loss = ty::mean(ty::square(ty::matmul(x, W) + b));
inline void snippet(ty::session<>& s, ty::tensor<float>& batch) {
  // @snippet
}
