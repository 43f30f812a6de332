"""What the base, rocm, tuning, exporter and docker roles leave on a host, as plan items (pure).

Each function takes the role's own settings (as the role does) and the offline host facts, and
returns :class:`Items`; every file's content comes from the same definition the role writes it
with (:mod:`rocmfleet.plan.baseplan`, :mod:`rocmfleet.plan.rocmplan`, :mod:`rocmfleet.plan.tuningplan`,
:mod:`rocmfleet.plan.exporterplan`, :func:`rocmfleet.domain.docker.daemon_json`), so what
``rocmfleet plan --files`` prints is what the deploy writes. The vllm role's items are
:mod:`rocmfleet.plan.build`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rocmfleet.config.hostsettings import HostSettings
from rocmfleet.domain import docker, exporter, rocm, tuning
from rocmfleet.domain.metrics import MetricsSettings
from rocmfleet.plan import baseplan, exporterplan, rocmplan, tuningplan
from rocmfleet.plan.hoststate import WantedFile
from rocmfleet.plan.model import DirectoryPlan, FilePlan, PackagePlan, Removal, Role, UnitPlan
from rocmfleet.plan.sources import HostFacts

#: Where Docker's ``daemon.json`` is (``roles/docker``), written root's, 0644 (``operations/docker.daemon_json``).
DAEMON_JSON = "/etc/docker/daemon.json"
DOCKER_UNIT = "docker.service"
#: What an offline plan calls the host's running kernel where no recorded host gives it.
RUNNING_KERNEL = "RUNNING-KERNEL"


@dataclass
class Items:
    """Plan items as a role adds them (lists, in the role's order)."""

    files: list[FilePlan] = field(default_factory=list)
    directories: list[DirectoryPlan] = field(default_factory=list)
    packages: list[PackagePlan] = field(default_factory=list)
    units: list[UnitPlan] = field(default_factory=list)
    removals: list[Removal] = field(default_factory=list)
    reboot_reasons: list[str] = field(default_factory=list)
    expect: dict[str, str] = field(default_factory=dict)
    ports: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def file(self, role: Role, wanted: WantedFile) -> None:
        """Add ``wanted`` (content, mode, owner as the role writes it)."""
        self.files.append(FilePlan(wanted.path, role, wanted.mode, wanted.user, wanted.group, wanted.content.decode()))

    def extend(self, other: Items) -> None:
        """Add every item of ``other`` after this one's."""
        for name in ("files", "directories", "packages", "units", "removals", "reboot_reasons", "ports", "problems"):
            getattr(self, name).extend(getattr(other, name))
        self.expect.update(other.expect)


def os_target(facts: HostFacts) -> tuple[rocm.OsTarget, str]:
    """The OS target of AMD's repositories for ``facts`` and the problem (``""``: supported); an
    unsupported OS plans as Debian 12, as the deploy falls back to (``roles/rocm``), and says so."""
    try:
        return rocm.os_target(facts.os_id, facts.os_version), ""
    except rocm.UnsupportedHost as exc:
        return rocm.OS_TARGETS[("debian", "12")], str(exc)


def base_items(settings: HostSettings) -> Items:
    """apt's lock timeout and proxy files, the base packages (any version)."""
    items = Items()
    items.file("base", baseplan.lock_file(settings))
    proxy = baseplan.proxy_file(settings)
    if proxy is None:
        items.removals.append(Removal(baseplan.APT_PROXY_FILE, "base", "no apt_proxy"))
    else:
        items.file("base", proxy)
    items.packages += [PackagePlan(p, "base", "*") for p in settings.base_packages]
    return items


def rocm_items(settings: rocm.RocmSettings, facts: HostFacts) -> Items:
    """AMD's keyrings (fetched), apt files, DKMS signing configuration, device access, driver and
    userspace packages, and when the deploy reboots."""
    items = Items()
    target, problem = os_target(facts)
    if problem:
        items.problems.append(problem)
    items.directories.append(DirectoryPlan(rocm.KEYRING_DIR, "rocm", "755", None, None))
    keys = {rocm.LEGACY_KEYRING: settings.rocm_key_url}
    if settings.rocm_stream == "current" and settings.rocm_userspace:
        keys[rocm.CURRENT_KEYRING] = settings.rocm_current_key_url
    else:
        items.removals.append(Removal(rocm.CURRENT_KEYRING, "rocm", "no current-stream userspace"))
    for path, url in keys.items():
        items.files.append(FilePlan(path, "rocm", "644", None, None, None, f"fetched from {url}"))
    texts = rocmplan.repo_file_texts(settings, target)
    texts[rocm.DKMS_SIGNING_CONF] = rocmplan.signing_text(settings)
    texts[rocm.UDEV_RULE] = rocmplan.udev_text() if settings.rocm_device_access == "udev" else None
    why = {rocm.DKMS_SIGNING_CONF: "no MOK signing key (rocm_mok_*)", rocm.UDEV_RULE: "rocm_device_access: groups"}
    for path, text in texts.items():
        if text is None:
            said = why.get(path, f"not an apt file of ROCm {settings.rocm_version} ({settings.rocm_stream} stream)")
            items.removals.append(Removal(path, "rocm", said))
        else:
            items.file("rocm", WantedFile(path, text.encode(), "644"))
    if settings.rocm_device_access == "groups":
        users = ",".join(settings.rocm_device_users) or "(none)"
        items.expect["device access"] = f"groups video, render; users {users}"
    headers = rocm.header_packages(target, facts.kernel or RUNNING_KERNEL)
    items.packages += [PackagePlan(p, "rocm", "*") for p in headers]
    items.packages += [
        PackagePlan(p, "rocm", f"the version of {settings.driver_repo}", held=True)
        for p in settings.rocm_driver_packages
    ]
    if settings.rocm_userspace:
        repo = rocm.userspace_repo(settings, target)
        items.packages += [PackagePlan(p, "rocm", f"the version of {repo}") for p in settings.userspace_packages]
    items.reboot_reasons.append(
        f"amdgpu driver {settings.amdgpu_version}: installed, moved or rebuilt (a host not at it reboots once)"
    )
    items.expect["amdgpu driver"] = settings.amdgpu_version
    items.expect["rocm"] = f"{settings.rocm_version} ({settings.rocm_stream} stream)"
    return items


def tuning_items(settings: tuning.TuningSettings, facts: HostFacts) -> Items:
    """The sysctl file, the kernel command line, the CPU tuning unit and ``cpupower``."""
    items = Items()
    sysctl = tuningplan.sysctl_file(settings)
    if sysctl is None:
        items.removals.append(Removal(tuning.SYSCTL_FILE, "tuning", "NUMA balancing left alone"))
    else:
        items.file("tuning", sysctl)
        items.expect["sysctl kernel.numa_balancing"] = "0"
    unit = tuningplan.cpu_unit_file(settings)
    if unit is None:
        items.removals.append(Removal(tuning.CPU_UNIT_PATH, "tuning", "no CPU setting asks for it"))
    else:
        items.file("tuning", unit)
        items.units.append(UnitPlan(tuning.CPU_UNIT, "tuning", None, True))
        packages = tuning.cpupower_packages(facts.os_id, facts.kernel or RUNNING_KERNEL)
        items.packages += [PackagePlan(p, "tuning", "*") for p in packages]
    params = " ".join(settings.kernel_params)
    items.expect["kernel cmdline"] = params or "(no rocmfleet parameter)"
    if params:
        items.reboot_reasons.append(f"kernel command line gets {params} (where /etc/default/grub lacks it)")
    return items


def exporter_items(settings: MetricsSettings, facts: HostFacts) -> Items:
    """AMD's device-metrics-exporter: its files, package (held) and units; nothing when off."""
    items = Items()
    if not settings.metrics_exporter:
        return items
    target, _ = os_target(facts)
    for wanted in exporterplan.wanted_files(settings, target):
        items.file("exporter", wanted)
    repo = exporter.repo_url(settings)
    items.packages.append(PackagePlan(exporter.PACKAGE, "exporter", f"the version of {repo}", held=True))
    items.units += [UnitPlan(unit, "exporter", True, True) for unit in exporter.UNITS]
    items.ports.append(settings.metrics_exporter_port)
    return items


def docker_items(settings: HostSettings) -> Items:
    """Docker's packages (the engine held at ``docker_version`` when set), ``daemon.json``, the service."""
    items = Items()
    packages = list(docker.PACKAGES[settings.docker_source])
    if settings.docker_version:
        engine = docker.ENGINE_PACKAGES[settings.docker_source]
        items.packages += [PackagePlan(p, "docker", settings.docker_version, held=True) for p in engine]
        packages = [p for p in packages if p not in engine]
    items.packages += [PackagePlan(p, "docker", "*") for p in packages]
    items.file("docker", WantedFile(DAEMON_JSON, docker.daemon_json(settings).encode(), "644", "root", "root"))
    items.units.append(UnitPlan(DOCKER_UNIT, "docker", True, True))
    return items
