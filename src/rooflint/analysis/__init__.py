"""Analysis of measured rows, with no GPU needed: lint, compare, projection to another GPU, and
reading Nsight Compute counters."""
