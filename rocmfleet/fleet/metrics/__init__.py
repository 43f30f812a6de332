"""Fleet metrics: reading ``/metrics`` on hosts, scrape targets, the soak comparison."""
