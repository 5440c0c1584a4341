"""workers/alerting."""
