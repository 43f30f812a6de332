"""rocmfleet.plan."""
