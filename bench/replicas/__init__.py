"""Section 5 (`python -m bench replicas`): 1, 2 and 4 data planes on one Redis, and herding
between scrapes; reuses the soak's simulated fleet and table."""
