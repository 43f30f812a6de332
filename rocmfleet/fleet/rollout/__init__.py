"""rocmfleet.fleet.rollout."""
