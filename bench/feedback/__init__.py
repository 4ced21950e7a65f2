"""Section 6 (`python -m bench feedback`): latency feedback and accuracy drift close the loop."""
