"""rideout."""
