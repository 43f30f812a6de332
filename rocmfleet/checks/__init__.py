"""Compliance checks: plain pytest test functions taking testinfra's ``host`` fixture.

Run them against hosts with testinfra, e.g.
``pytest --pyargs rocmfleet.checks --hosts=ssh://root@10.0.0.11 --ssh-config=...``. They read
what a host should be from ``ROCMFLEET_CHECK_*`` environment variables where it depends on
inventory data (see :mod:`rocmfleet.checks.expect`), and skip, saying why, what needs the real
kernel or hardware where the host has neither (a container).
"""
