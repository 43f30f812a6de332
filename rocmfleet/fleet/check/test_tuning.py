"""Compliance of the tuning role: each AMD MI300X setting live *and* persisted (reference §1.1)."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import pytest

from rocmfleet.domain import tuning
from rocmfleet.domain.tooloutput import CannotCheck
from rocmfleet.fleet.check.expect import (
    exists,
    gathered,
    in_container,
    path_state,
    text,
    unit_state,
)
from rocmfleet.plan.drift import drift, plan_wanted
from rocmfleet.plan.hostdrift import role_items

if TYPE_CHECKING:
    from testinfra.host import Host

    from rocmfleet.plan.checkmodel import CheckValues
    from rocmfleet.plan.model import FilePlan, HostPlan


def planned_file(plan: HostPlan, path: str) -> FilePlan | None:
    """The tuning role's file ``path`` of the host's plan (``None``: the role keeps it absent)."""
    return next((f for f in plan.files if f.role == "tuning" and f.path == path), None)


def _as_written(host: Host, plan: HostPlan, path: str, why_none: str) -> None:
    """``path`` is what the deploy writes (the plan's file: content, mode, owner, by the drift rule,
    :func:`rocmfleet.plan.drift.drift`), or absent when the plan has no such file."""
    wanted = planned_file(plan, path)
    if wanted is None:
        assert not exists(host, path), f"{path} exists; {why_none}"
        return
    found = path_state(host, path)
    only = role_items(plan, "tuning")
    items = [w for w in plan_wanted(only) if getattr(w, "path", None) == path]
    assert not drift(items, gathered(host)), (
        f"{path}: {found.type}, mode {found.mode}, sha256 {found.sha256}; the deploy writes mode {wanted.mode}, "
        f"sha256 {hashlib.sha256((wanted.content or '').encode()).hexdigest()}"
        + (f" (its text: {(text(host, path) or '').strip()!r})" if found.type == "file" else "")
    )


def test_numa_balancing_persisted(host: Host, plan: HostPlan) -> None:
    """The sysctl file holds ``kernel.numa_balancing = 0`` as the role writes it (AMD's MI300X tuning guide), or is
    absent when not asked."""
    _as_written(host, plan, tuning.SYSCTL_FILE, "tuning_numa_balancing_off is false")


def test_numa_balancing_live(host: Host, checks: CheckValues) -> None:
    """``kernel.numa_balancing`` is 0 now; skipped on a kernel without it or a container host."""
    if not checks.numa_balancing_off:
        pytest.skip("tuning_numa_balancing_off is false")
    live = gathered(host).sysctls.get("kernel.numa_balancing")
    if live is None:
        raise CannotCheck("state.sh did not report kernel.numa_balancing")
    if live.value is None:
        pytest.skip("this kernel has no automatic NUMA balancing")
    if in_container(host):
        pytest.skip("container host: /proc/sys is the machine's and read-only; the value is persisted")
    assert live.value == "0", f"kernel.numa_balancing is {live.value}"


def test_kernel_cmdline_persisted(host: Host, checks: CheckValues) -> None:
    """GRUB's ``GRUB_CMDLINE_LINUX`` and every ``linux`` line of grub.cfg carry the role's parameters (``iommu=pt``,
    ``pci=realloc=off`` and the extras)."""
    params = tuning.grub_cmdline(text(host, tuning.GRUB_DEFAULTS) or "")
    assert set(checks.kernel_params) <= set(params), f"GRUB_CMDLINE_LINUX: {' '.join(params)}"
    cfg = text(host, "/boot/grub/grub.cfg")
    assert cfg is not None, "update-grub never ran"
    linux = tuning.grub_cfg_linux_lines(cfg)
    assert all(set(checks.kernel_params) <= set(words) for words in linux), "grub.cfg is stale"


def test_kernel_cmdline_live(host: Host, checks: CheckValues) -> None:
    """The running kernel was booted with the role's parameters (/proc/cmdline); skipped on a container host."""
    if in_container(host):
        pytest.skip("container host: /proc/cmdline is the machine's kernel command line")
    live = tuning.cmdline_params(text(host, "/proc/cmdline") or "")
    assert set(checks.kernel_params) <= set(live), live


def test_cpu_unit_enabled(host: Host, plan: HostPlan) -> None:
    """The CPU tuning unit is as the role writes it and enabled, with ``cpupower`` present, when a CPU setting asks for
    it (C2 off, a governor)."""
    _as_written(host, plan, tuning.CPU_UNIT_PATH, "no CPU setting asks for it")
    if planned_file(plan, tuning.CPU_UNIT_PATH) is None:
        return
    enabled = unit_state(host, tuning.CPU_UNIT).enabled
    assert enabled == "enabled", f"{tuning.CPU_UNIT} is {enabled}, not enabled"
    assert host.exists("cpupower")


def test_c2_disabled_live(host: Host, checks: CheckValues) -> None:
    """Idle state 2 (C2) is disabled on every CPU now, as AMD recommends for MI300X; skipped where there is none."""
    if not checks.disable_c2:
        pytest.skip("tuning_disable_c2 is false")
    if in_container(host):
        pytest.skip("container host: CPU idle states belong to the machine it runs on")
    states = host.run("ls -d /sys/devices/system/cpu/cpu*/cpuidle/state2 2>/dev/null").stdout.split()
    if not states:
        pytest.skip("this machine has no idle state 2")
    for state in states:
        assert host.file(f"{state}/disable").content_string.strip() == "1", state


def test_thp_and_governor_untouched_unless_asked(host: Host, checks: CheckValues) -> None:
    """Transparent huge pages and the CPU governor are left alone unless a setting asks: AMD documents
    none for MI300X."""
    grub = text(host, tuning.GRUB_DEFAULTS) or ""
    if checks.transparent_hugepage is None:
        assert "transparent_hugepage=" not in grub
    unit = text(host, tuning.CPU_UNIT_PATH)
    if checks.cpu_governor is None and unit is not None:
        assert "frequency-set" not in unit
