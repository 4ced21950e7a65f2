"""Redis adapters: profiles, the policy, published tables, atomic publishing.
It may import `build` and `settings`, never `loop` (its sibling) or a floor above."""
