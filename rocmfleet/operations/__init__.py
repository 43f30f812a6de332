"""pyinfra operations rocmfleet adds (one module per domain, as in ``pyinfra.operations``)."""
