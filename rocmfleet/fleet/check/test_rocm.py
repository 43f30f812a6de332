"""Compliance of the ROCm role: as the deploy wants it (one rule), device nodes, no reboot owed."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from rocmfleet import scripts
from rocmfleet.domain import rocm, rocmtools
from rocmfleet.domain.tooloutput import CannotCheck
from rocmfleet.facts.rocm import REBOOT_DIR
from rocmfleet.fleet.check.expect import device_nodes, exists, exporter_gathered, rocm_gathered, rocm_settings
from rocmfleet.plan import exporterplan, rocmplan

if TYPE_CHECKING:
    from testinfra.host import Host


@pytest.fixture(scope="module")
def settings(host: Host) -> rocm.RocmSettings:
    return rocm_settings(host)


#: Reasons of :func:`rocmfleet.plan.rocmplan.differs` that ``drift::role_as_wanted[rocm]`` says by the
#: plan's rule (the role's files, the kernel headers, the driver packages' holds): one fault, one failed check.
SAID_BY_DRIFT = re.compile(r"^(/\S+ differs|kernel headers missing|\S+ not held \(apt-mark hold\))$")


def test_rocm_role_as_wanted(host: Host, settings: rocm.RocmSettings) -> None:
    """Nothing the rocm role would change beyond its plan's items: the deploy's own rule
    (:func:`rocmfleet.plan.rocmplan.differs` over the deploy's read of the role,
    :func:`rocmfleet.fleet.check.expect.rocm_gathered`): nothing of the other stream, the keyrings
    equal to the keys AMD publishes, the driver (and the userspace when asked) at the version of the
    configured repository, DKMS built for the running and newest kernels, no reboot owed, the driver
    up. AMD's apt files, the udev rule, the kernel headers and the driver's holds are
    ``drift::role_as_wanted[rocm]``'s (:data:`SAID_BY_DRIFT`). Each difference is one ``; ``-separated reason."""
    found = rocmplan.differs(settings, rocm_gathered(host))
    if found and all(r.startswith("not read") or r == "OS not read" for r in found):
        raise CannotCheck(f"the read could not tell: {'; '.join(found)}")
    found = [r for r in found if not SAID_BY_DRIFT.match(r)]
    assert not found, "; ".join(found)


def test_metrics_exporter_as_wanted(host: Host) -> None:
    """AMD's device-metrics-exporter package at the version of its release's repository
    (:func:`rocmfleet.plan.exporterplan.package_problem`, the exporter role's rule); its hold, apt
    source, ``/etc/metrics/config.json``, drop-in and units are ``drift::role_as_wanted[exporter]``'s.
    Skipped with ``metrics_exporter: false`` (the deploy leaves the exporter alone then)."""
    settings, got = exporter_gathered(host)
    if not settings.metrics_exporter:
        pytest.skip("metrics_exporter is off: the deploy leaves the exporter alone")
    found = exporterplan.package_problem(settings, got)
    assert found is None or found.endswith("not held (apt-mark hold)"), found


def test_pin_file_live_for_legacy(host: Host, settings: rocm.RocmSettings) -> None:
    """apt's live policy gives AMD's legacy repository priority 600 (the pin file itself is part of
    ``drift::role_as_wanted[rocm]``)."""
    if settings.rocm_stream != "legacy":
        pytest.skip("the pin is the legacy stream's")
    policy = host.check_output("apt-cache policy")
    assert "600" in policy and "o=repo.radeon.com" in policy


def test_device_access_users(host: Host, settings: rocm.RocmSettings) -> None:
    """With ``rocm_device_access: groups``, every user of ``rocm_device_users`` is in ``video`` and ``render`` (AMD's
    group method); skipped with the udev rule."""
    if settings.rocm_device_access == "udev":
        pytest.skip("udev access: the rule is part of test_rocm_role_as_wanted")
    for user in settings.rocm_device_users:
        assert {"video", "render"} <= set(host.user(user).groups), user


def test_device_nodes_owned_by_render(host: Host) -> None:
    """/dev/kfd and every render node belong to group ``render``."""
    assert exists(host, "/dev/kfd"), "/dev/kfd is missing"
    wrong = [f"{path} {node.group}" for path, node in device_nodes(host).items() if node.group != "render"]
    assert not wrong, "not group render: " + ", ".join(wrong)


def test_device_access_live(host: Host, settings: rocm.RocmSettings) -> None:
    """With the udev rule, /dev/kfd and every render node have mode 666 now (AMD's udev method); skipped
    without udev."""
    if settings.rocm_device_access != "udev":
        pytest.skip("group access: membership is checked in test_device_access_persisted")
    if not exists(host, "/run/udev/control"):
        pytest.skip("udev is not running on this host (container): device modes come from whoever made the nodes")
    for path, node in device_nodes(host).items():
        assert node.mode == "666", f"{path}: mode {node.mode}, want 666"


def test_no_reboot_owed(host: Host) -> None:
    """No reboot is owed: the running kernel and amdgpu module are those installed and no package asked for one
    (``reboot-owed.sh``)."""
    result = host.run(scripts.command("reboot-owed.sh", REBOOT_DIR))
    owed = rocmtools.reboot_reasons(result.rc, result.stdout, result.stderr)
    assert not owed, f"a reboot is owed: {'; '.join(owed)}"
