"""Compliance checks: plain pytest test functions taking testinfra's ``host`` fixture.

``rocmfleet check INVENTORY`` runs them on every host of an inventory (see
:mod:`rocmfleet.compliance`). They read what a host should be from the inventory named in
``ROCMFLEET_CHECK_INVENTORY`` (see :mod:`rocmfleet.checks.expect`), and skip, saying why, what
needs the real kernel or hardware where the host has neither (a container), or what depends on
a check that already failed (no container checks when the unit is stopped).
"""
