// Context of a docs snippet (scripts/check_snippets.py): declarations at namespace scope.
// @snippet
