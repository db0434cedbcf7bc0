// Context of a docs snippet (scripts/check_snippets.py): a sequence, a state and tokens.
constexpr auto xs = ty::placeholder<"xs", float, ty::shape<20, ty::dyn, 16>>;
constexpr auto h0 = ty::placeholder<"h0", float, ty::shape<ty::dyn, 64>>;
constexpr auto tokens = ty::placeholder<"tokens", std::int32_t, ty::shape<ty::dyn, 32>>;
inline void snippet() {
  // @snippet
}
