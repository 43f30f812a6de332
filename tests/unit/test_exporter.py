"""AMD's device-metrics-exporter: the files rocmfleet renders (against AMD's deb-package.rst), the
exporter role's one rule over a ``HostState`` read (:mod:`rocmfleet.plan.exporterplan`), and the
role against a pyinfra ``@fake`` host: a converged host gets no operation."""

from __future__ import annotations

import hashlib
import json
import subprocess

from rocmfleet.config.settings import host_config
from rocmfleet.domain import exporter, rocm
from rocmfleet.domain.metrics import MetricsSettings
from rocmfleet.facts.state import Gathered, parse_state
from rocmfleet.operations import rocm as rocm_ops
from rocmfleet.plan import drift, exporterplan, hostdrift
from rocmfleet.plan.build import plan_host
from rocmfleet.roles import exporter as exporter_role
from tests.unit.test_roles_state import names, run, state

DEBIAN12 = rocm.os_target("debian", "12")
SETTINGS = MetricsSettings()
VERSION = "1.5.4-72~22.04"
OS = {"kind": "os", "id": "debian", "version_id": "12", "codename": "bookworm", "kernel": "6.1.0-28-amd64"}


def _file(path: str, text: str, mode: str = "644") -> str:
    sha = hashlib.sha256(text.encode()).hexdigest()
    item = {"kind": "path", "path": path, "type": "file", "mode": mode, "user": "root", "group": "root"}
    return json.dumps({**item, "gid": "0", "sha256": sha})


def converged(
    settings: MetricsSettings = SETTINGS,
    status: str = "hi ",
    config: str | None = None,
    active: str = "active",
    offered: str = VERSION,
) -> list[str]:
    """``state.sh``'s lines for :func:`exporterplan.query` on a host the role converged."""
    lines = [
        json.dumps(OS),
        _file(exporter.SOURCE_FILE, exporter.apt_source(settings, DEBIAN12)),
        _file(exporter.CONFIG_FILE, config if config is not None else exporter.config_json(settings)),
        _file(exporter.DROPIN_FILE, exporter.dropin()),
        json.dumps({"kind": "pkg", "package": exporter.PACKAGE, "status": status, "version": VERSION}),
        *(
            json.dumps({"kind": "unit", "unit": u, "load": "loaded", "active": active, "enabled": "enabled"})
            for u in exporter.UNITS
        ),
        json.dumps(
            {
                "kind": "run",
                "key": exporterplan.RUN_VERSIONS,
                "text": f"{exporter.PACKAGE} | {offered} | {exporter.repo_url(settings)} jammy/main amd64 Packages",
            }
        ),
        json.dumps({"kind": "ran", "key": exporterplan.RUN_VERSIONS, "rc": 0}),
    ]
    return [*lines, '{"kind":"end"}']


def test_the_source_line_is_amds_for_the_release_and_suite():
    # deb-package.rst "Step 3", Ubuntu 22.04 (Debian 12 takes jammy, as the driver's repository)
    assert exporter.apt_source(SETTINGS, DEBIAN12) == (
        "deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg] "
        "https://repo.radeon.com/device-metrics-exporter/apt/1.5.4 jammy main\n"
    )
    noble = rocm.os_target("ubuntu", "24.04")
    assert exporter.apt_source(SETTINGS, noble).endswith("/device-metrics-exporter/apt/1.5.4 noble main\n")


def test_the_config_sets_the_port_and_the_dropin_makes_the_exporter_read_it():
    settings = MetricsSettings(metrics_exporter_port=5999)
    assert json.loads(exporter.config_json(settings)) == {"ServerPort": 5999}
    lines = exporter.dropin().splitlines()
    assert lines[-2:] == [
        "ExecStart=",
        "ExecStart=/usr/local/bin/amd-metrics-exporter -amd-metrics-config /etc/metrics/config.json",
    ]
    assert "[Service]" in lines


def test_stop_and_start_order_the_agent_under_the_exporter():
    assert exporter.stop_command() == "systemctl stop amd-metrics-exporter.service gpuagent.service"
    assert exporter.start_command() == "systemctl start gpuagent.service amd-metrics-exporter.service"


#: A stand-in ``systemctl`` (stop, is-active) over the units in ``$UNITS`` (a directory, one file
#: per unit holding its state): as systemd's, ``stop`` of a unit with no unit file fails (``Unit X
#: not loaded.``, exit 5) after stopping the others, ``is-active`` exits 0 when at least one unit is
#: active (systemctl(1)); ``stuck``: a unit whose stop fails and that stays active.
FAKE_SYSTEMCTL = """#!/bin/sh
verb=$1; shift; [ "$1" = --quiet ] && shift
rc=3; [ "$verb" = stop ] && rc=0
for unit in "$@"; do
    state=$(cat "$UNITS/$unit" 2>/dev/null)
    if [ "$verb" = stop ]; then
        case $state in
            '') echo "Failed to stop $unit: Unit $unit not loaded." >&2; rc=5 ;;
            stuck) echo "Job for $unit failed." >&2; rc=1 ;;
            *) echo inactive > "$UNITS/$unit" ;;
        esac
    elif [ "$state" = active ] || [ "$state" = stuck ]; then rc=0; fi
done
exit $rc
"""


def _stop_on(tmp_path, **units: str) -> tuple[int, dict[str, str]]:
    """The driver change's stop on a stand-in host with ``units`` (``name`` without ``.service``: state)."""
    import os
    import shutil

    bin_dir, unit_dir = tmp_path / "bin", tmp_path / "units"
    shutil.rmtree(unit_dir, ignore_errors=True)
    bin_dir.mkdir(exist_ok=True)
    unit_dir.mkdir()
    (bin_dir / "systemctl").write_text(FAKE_SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    for name, unit_state in units.items():
        (unit_dir / f"{name.replace('_', '-')}.service").write_text(unit_state)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "UNITS": str(unit_dir)}
    (command,) = rocm_ops.exporter_stopped(True)
    done = subprocess.run(["sh", "-c", str(command)], env=env, capture_output=True, text=True, check=False)
    return done.returncode, {p.name: p.read_text().strip() for p in unit_dir.iterdir()}


def test_the_stop_before_a_driver_change_passes_when_a_unit_is_absent_and_fails_when_one_still_runs(tmp_path):
    # amdgpu-exporter installed, its GPU agent's unit file gone (removed by hand, or a release that
    # names it otherwise): systemctl stop exits 5, which failed the driver change it guards
    assert _stop_on(tmp_path, amd_metrics_exporter="active") == (0, {"amd-metrics-exporter.service": "inactive"})
    assert _stop_on(tmp_path, amd_metrics_exporter="active", gpuagent="active")[0] == 0
    assert _stop_on(tmp_path, amd_metrics_exporter="stuck", gpuagent="active")[0] != 0


def differs(settings: MetricsSettings, got: Gathered) -> list[str]:
    """Why the exporter role would act: its plan items' drift on ``got`` and the package's rule."""
    data = {"vllm_profile": "lab-tiny-llama", "metrics_exporter": settings.metrics_exporter}
    config = host_config({**data, "metrics_exporter_port": settings.metrics_exporter_port})
    items = hostdrift.role_items(plan_host("", config), "exporter")
    if not settings.metrics_exporter:
        assert drift.plan_wanted(items) == []
        return []
    found = drift.drift(drift.plan_wanted(items), got)
    return exporter_role.reasons(found, exporterplan.package_problem(settings, got))


def test_a_converged_host_differs_in_nothing():
    assert differs(SETTINGS, parse_state(converged())) == []


def test_unheld_wrong_version_changed_config_and_stopped_units_are_named():
    assert differs(SETTINGS, parse_state(converged(status="ii "))) == ["amdgpu-exporter not held (apt-mark hold)"]
    assert differs(SETTINGS, parse_state(converged(offered="1.5.5-1"))) == [
        "amdgpu-exporter not at the version of https://repo.radeon.com/device-metrics-exporter/apt/1.5.4"
    ]
    found = differs(SETTINGS, parse_state(converged(config='{"ServerPort": 5001}\n')))
    assert len(found) == 1 and found[0].startswith("/etc/metrics/config.json: content ")
    assert differs(SETTINGS, parse_state(converged(active="inactive"))) == [
        "gpuagent.service: active inactive, want active",
        "amd-metrics-exporter.service: active inactive, want active",
    ]


def test_a_port_change_is_a_config_change():
    found = differs(MetricsSettings(metrics_exporter_port=5001), parse_state(converged()))
    assert [f.split(":")[0] for f in found] == [exporter.CONFIG_FILE]


def test_a_read_without_the_items_differs_and_off_reads_and_differs_in_nothing():
    found = differs(SETTINGS, parse_state([json.dumps(OS), '{"kind":"end"}']))
    assert found[0].startswith("amdgpu-exporter not at the version of")
    assert "/etc/metrics/config.json: not reported by the read" in found
    off = MetricsSettings(metrics_exporter=False)
    assert exporterplan.query(off) == {}
    assert differs(off, parse_state(['{"kind":"end"}'])) == []


def test_the_hosts_one_read_asks_for_the_exporter():
    query = exporterplan.query(host_config({"vllm_profile": "lab-tiny-llama"}).metrics)
    assert query["packages"] == [exporter.PACKAGE]
    assert query["units"] == ["gpuagent.service", "amd-metrics-exporter.service"]
    assert exporter.CONFIG_FILE in query["paths"]  # type: ignore[operator]


ROLE = (
    "import rocmfleet.roles.exporter as r; from pyinfra.context import host;"
    " from rocmfleet.facts.state import HostState; from rocmfleet.plan import drift, hoststate;"
    " items = hostdrift.role_items(plan, 'exporter');"
    " got = host.get_fact(HostState, **hoststate.merge_queries(drift.query(items), r.query(config.metrics)));"
    " r.apply(config.metrics, items, got)"
)


def test_the_role_on_a_converged_host_calls_no_operation(tmp_path):
    assert run(tmp_path, ROLE, {"' state.sh ": converged()}, dry=True) == []


def test_the_role_renders_a_changed_config_restarts_the_exporter_and_starts_a_stopped_unit(tmp_path):
    lines = converged(config="{}\n", active="inactive")
    operations = run(tmp_path, ROLE, {"' state.sh ": lines}, dry=True)
    assert names(operations) == [
        "Render /etc/metrics/config.json",
        "Enable and start gpuagent.service",
        "Enable and start amd-metrics-exporter.service",
        "Restart amd-metrics-exporter.service for its new configuration",
    ]


def test_the_role_installs_an_unheld_exporter_through_the_drivers_operation(tmp_path):
    operations = run(tmp_path, ROLE, {"' state.sh ": converged(status="ii ")}, dry=True)
    assert names(operations) == ["Install AMD's metrics exporter from device-metrics-exporter/apt/1.5.4 and hold it"]


def test_the_role_with_the_exporter_off_calls_nothing(tmp_path):
    assert run(tmp_path, ROLE, state(), data={"metrics_exporter": False}, dry=True) == []
