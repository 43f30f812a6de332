"""rocmfleet.config."""
