"""rocmfleet.domain."""
