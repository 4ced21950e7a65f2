"""Redis adapters: profiles, the policy, published tables, atomic publishing."""
