// Context of a docs snippet (scripts/check_snippets.py): statements in a function, no names.
inline void snippet() {
  // @snippet
}
