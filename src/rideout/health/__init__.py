"""Failure detection: the canary, metrics, CloudWatch-style alarms, health checks."""
