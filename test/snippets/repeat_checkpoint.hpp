// Context of a docs snippet (scripts/check_snippets.py): checkpoints, a byte budget, remat.
constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 64>>;
constexpr auto y = ty::placeholder<"y", float, ty::shape<ty::dyn, 1>>;
inline void snippet() {
  // @snippet
}
