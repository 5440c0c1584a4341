"""warmup/planning."""
