"""The state engine: Redis key names, embedded servers, replication roles."""
