"""PURE: what the closed loop decides from live evidence: drift, refits, reverts, demotions."""
