"""warmcast/config."""
