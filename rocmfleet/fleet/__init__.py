"""rocmfleet.fleet."""
