"""Compliance checks: plain pytest test functions taking testinfra's ``host`` fixture.

``rocmfleet check INVENTORY`` runs them on every host of an inventory (see
:mod:`rocmfleet.fleet.check.compliance`). They read what a host should be from its plan, which
the parent made (``ROCMFLEET_CHECK_FILE``, see :mod:`rocmfleet.fleet.check.hostplan` and
:mod:`rocmfleet.fleet.check.expect`), reach the host through
:mod:`rocmfleet.fleet.check.backend` (:mod:`rocmfleet.fleet.connect`'s session), and skip, saying why, what
needs the real kernel or hardware where the host has neither (a container), or what depends on
a check that already failed (no container checks when the unit is stopped).
"""
