"""rocmfleet.fleet.cache."""
