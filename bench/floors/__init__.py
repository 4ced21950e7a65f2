"""Section 3b (`python -m bench floors`): floors near the truth, without X-Task-Category, graded
against TRUE accuracy; builds on the quality section's fleet and replay."""
