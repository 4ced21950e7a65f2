"""PURE: what the closed loop decides from live evidence: drift, refits, reverts, demotions.
It may import `build` and `settings`, never `store` (its sibling) or a floor above."""
