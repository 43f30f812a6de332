"""Tuning role logic: AMD's defaults, the GRUB command line edit, sysctl and the CPU unit."""

from __future__ import annotations

import pytest

from rocmfleet.config.errors import ConfigError
from rocmfleet.config.settings import host_config
from rocmfleet.domain import tuning

DEBIAN_GRUB = """GRUB_DEFAULT=0
GRUB_TIMEOUT=5
GRUB_CMDLINE_LINUX_DEFAULT="quiet"
GRUB_CMDLINE_LINUX=""
"""


def _settings(**data) -> tuning.TuningSettings:
    return host_config({"vllm_profile": "llama-4-scout", **data}).tuning


def test_defaults_are_amds():
    settings = _settings()
    assert settings.kernel_params == ["iommu=pt", "pci=realloc=off"]
    assert tuning.sysctl_conf(settings) == "kernel.numa_balancing = 0\n"
    assert tuning.cpu_unit_commands(settings) == ["/usr/bin/cpupower idle-set -d 2"]
    assert settings.tuning_transparent_hugepage is None and settings.tuning_cpu_governor is None


def test_grub_edit_adds_params_and_is_stable():
    once = tuning.edit_grub_defaults(DEBIAN_GRUB, ["iommu=pt", "pci=realloc=off"])
    assert 'GRUB_CMDLINE_LINUX="iommu=pt pci=realloc=off"\n' in once
    assert 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"' in once
    assert tuning.edit_grub_defaults(once, ["iommu=pt", "pci=realloc=off"]) == once


def test_grub_edit_keeps_admin_params_and_removes_only_managed_ones():
    text = 'GRUB_CMDLINE_LINUX="console=ttyS0 iommu=pt pci=realloc=off transparent_hugepage=always"\n'
    assert tuning.edit_grub_defaults(text, ["iommu=pt"]) == 'GRUB_CMDLINE_LINUX="console=ttyS0 iommu=pt"\n'
    assert (
        tuning.edit_grub_defaults(text, ["iommu=pt", "pci=realloc=off", "transparent_hugepage=madvise"])
        == 'GRUB_CMDLINE_LINUX="console=ttyS0 iommu=pt pci=realloc=off transparent_hugepage=madvise"\n'
    )


def test_grub_edit_appends_missing_variable():
    assert (
        tuning.edit_grub_defaults("GRUB_TIMEOUT=5", ["iommu=pt"]) == 'GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX="iommu=pt"\n'
    )


def test_switches_off():
    settings = _settings(
        tuning_numa_balancing_off=False, tuning_iommu_pt=False, tuning_pci_realloc_off=False, tuning_disable_c2=False
    )
    assert settings.kernel_params == [] and tuning.sysctl_conf(settings) is None and not settings.cpu_unit_needed


def test_opt_ins():
    settings = _settings(
        tuning_transparent_hugepage="madvise",
        tuning_cpu_governor="performance",
        tuning_kernel_cmdline_extra=["intel_iommu=on"],
    )
    assert settings.kernel_params == ["iommu=pt", "pci=realloc=off", "transparent_hugepage=madvise", "intel_iommu=on"]
    assert tuning.cpu_unit_commands(settings)[-1] == "/usr/bin/cpupower frequency-set -g performance"


def test_cpupower_package_per_os():
    assert tuning.cpupower_packages("debian", "6.1.0-28-amd64") == ["linux-cpupower"]
    assert tuning.cpupower_packages("ubuntu", "6.8.0-45-generic") == [
        "linux-tools-common",
        "linux-tools-6.8.0-45-generic",
    ]


def test_cmdline_params_stop_at_double_dash():
    assert tuning.cmdline_params("ro iommu=pt -- --init") == ["ro", "iommu=pt"]


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"tuning_transparent_hugepage": "sometimes"}, "tuning_transparent_hugepage"),
        ({"tuning_kernel_cmdline_extra": ["a b"]}, "tuning_kernel_cmdline_extra"),
        ({"tuning_iommu": True}, "tuning_iommu"),
    ],
)
def test_bad_data_names_host_key_and_value(data, key):
    with pytest.raises(ConfigError) as exc:
        host_config({"vllm_profile": "llama-4-scout", **data})
    (problem,) = exc.value.problems
    assert problem.key == key, problem
