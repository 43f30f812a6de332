"""Compliance of the tuning role: each AMD MI300X setting live *and* persisted (reference §1.1)."""

from __future__ import annotations

import pytest

from rocmfleet import tuning
from rocmfleet.checks.expect import in_container, tuning_settings


@pytest.fixture(scope="module")
def settings(host):
    return tuning_settings(host)


def test_numa_balancing_persisted(host, settings):
    conf = host.file(tuning.SYSCTL_FILE)
    if not settings.tuning_numa_balancing_off:
        assert not conf.exists
        return
    assert conf.contains(r"^kernel\.numa_balancing = 0$")


def test_numa_balancing_live(host, settings):
    if not settings.tuning_numa_balancing_off:
        pytest.skip("tuning_numa_balancing_off is false")
    if not host.file("/proc/sys/kernel/numa_balancing").exists:
        pytest.skip("this kernel has no automatic NUMA balancing")
    if in_container(host):
        pytest.skip("container host: /proc/sys is the machine's and read-only; the value is persisted")
    assert host.sysctl("kernel.numa_balancing") == 0


def test_kernel_cmdline_persisted(host, settings):
    params = tuning.grub_cmdline(host.file(tuning.GRUB_DEFAULTS).content_string)
    assert set(settings.kernel_params) <= set(params), f"GRUB_CMDLINE_LINUX: {' '.join(params)}"
    cfg = host.file("/boot/grub/grub.cfg")
    assert cfg.exists, "update-grub never ran"
    linux = tuning.grub_cfg_linux_lines(cfg.content_string)
    assert all(set(settings.kernel_params) <= set(words) for words in linux), "grub.cfg is stale"


def test_kernel_cmdline_live(host, settings):
    if in_container(host):
        pytest.skip("container host: /proc/cmdline is the machine's kernel command line")
    live = tuning.cmdline_params(host.file("/proc/cmdline").content_string)
    assert set(settings.kernel_params) <= set(live), live


def test_cpu_unit_enabled(host, settings):
    unit = host.service(tuning.CPU_UNIT)
    if not settings.cpu_unit_needed:
        assert not host.file(tuning.CPU_UNIT_PATH).exists
        return
    assert unit.is_enabled
    assert host.exists("cpupower")


def test_c2_disabled_live(host, settings):
    if not settings.tuning_disable_c2:
        pytest.skip("tuning_disable_c2 is false")
    if in_container(host):
        pytest.skip("container host: CPU idle states belong to the machine it runs on")
    states = host.run("ls -d /sys/devices/system/cpu/cpu*/cpuidle/state2 2>/dev/null").stdout.split()
    if not states:
        pytest.skip("this machine has no idle state 2")
    for state in states:
        assert host.file(f"{state}/disable").content_string.strip() == "1", state


def test_thp_and_governor_untouched_unless_asked(host, settings):
    grub = host.file(tuning.GRUB_DEFAULTS).content_string
    if settings.tuning_transparent_hugepage is None:
        assert "transparent_hugepage=" not in grub
    unit = host.file(tuning.CPU_UNIT_PATH)
    if settings.tuning_cpu_governor is None and unit.exists:
        assert "frequency-set" not in unit.content_string
