"""pyinfra facts rocmfleet adds (``FactBase`` subclasses, one module per domain)."""
