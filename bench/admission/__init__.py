"""Section 9 (`python -m bench admission`): admission under a tenant's burst."""
