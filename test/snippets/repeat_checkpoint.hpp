// Context of a docs snippet (scripts/check_snippets.py): the input of a residual MLP (checkpoints and a byte budget).
constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 64>>;
constexpr auto y = ty::placeholder<"y", float, ty::shape<ty::dyn, 1>>;
inline void snippet() {
  // @snippet
}
