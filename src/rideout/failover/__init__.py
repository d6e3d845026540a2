"""Moving the writer between regions: failover, failback, fencing."""
