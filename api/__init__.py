"""warmcast HTTP API (FastAPI), dashboard, and autoscaler integration (KEDA, Prometheus)."""
