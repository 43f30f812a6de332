"""The Docker version pattern. ``packages.held_at`` (given facts, the commands it yields) and the
``HeldPackages`` fact are JSON cases: ``tests/operations/packages.held_at/``, ``tests/facts/packages.HeldPackages/``."""

from __future__ import annotations

import pytest

from rocmfleet.domain import docker


@pytest.mark.parametrize(
    ("apt_version", "server"),
    [
        ("5:27.5.1-1~debian.12~bookworm", "27.5.1"),
        ("20.10.24+dfsg1-*", "20.10.24+dfsg1"),
        ("5:27.5.*", "27.5.*"),
        ("27.5.1", "27.5.1"),
    ],
)
def test_server_version_is_the_upstream_part(apt_version, server):
    assert docker.server_version_pattern(apt_version) == server
