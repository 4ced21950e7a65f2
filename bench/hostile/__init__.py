"""Section 7 (`python -m bench hostile`): a hostile tenant beside normal clients."""
