"""The global control plane: status and metrics now; DNS, alarms and failover join it."""
