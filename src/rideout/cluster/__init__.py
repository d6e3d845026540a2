"""The local multi-region deployment: supervisor, run state, status."""
