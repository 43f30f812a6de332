"""rocmfleet.fleet.bench."""
