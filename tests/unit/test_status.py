"""``rocmfleet status`` against stand-in sessions answering from recorded facts: each row's ``drift``
is what the vllm role's plan says of the instance (``tests/fixtures/plans/lab-1``: the recorded
``HostState`` read, and that read with everything the role writes as the deploy leaves it), a
host that cannot be read keeps its row with ``error`` and ``drift`` null, and each host is read
over one connection.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from rocmfleet.cli.status import drift_rule
from rocmfleet.config.connection import SshSettings
from rocmfleet.config.settings import HostConfig, host_config
from rocmfleet.facts.state import parse_state
from rocmfleet.fleet import inventory as fleet_inventory
from rocmfleet.fleet.connect import ConnectError, Result
from rocmfleet.fleet.rollout import hoststeps
from rocmfleet.fleet.rollout import state as rstate
from rocmfleet.fleet.rollout.report import drift_cell, status_json
from rocmfleet.fleet.rollout.status import fleet_status
from rocmfleet.fleet.target import Target
from rocmfleet.plan import vllmplan
from rocmfleet.plan.hoststate import WantedFile
from rocmfleet.plan.instance import HostPlacement, last_good_of, place_host, serve_record

CASE = Path(__file__).resolve().parents[1] / "fixtures" / "plans" / "lab-1"
FACTS = json.loads((CASE / "facts.json").read_text())
#: The plan's reasons per instance for the recorded read, as checked in (``test_plans.py``).
WHY = {name: i["why"] for name, i in json.loads((CASE / "expected.json").read_text())["instances"].items()}
CONFIG = host_config(FACTS["data"])
IMAGE = CONFIG.image.reference
#: The keys ``rocmfleet status --json`` rows had before ``drift`` (the lab tests read them).
KEYS = {"host", "instance", "unit", "image", "ready", "not_ready", "uptime_s", "error"}


def _path(path: str, kind: str, mode: str, sha: str = "", user: str = "root", group: str = "root") -> str:
    item = {"kind": "path", "path": path, "type": kind, "mode": mode, "user": user, "group": group, "gid": "0"}
    return json.dumps({**item, "sha256": sha})


def converged(config: HostConfig) -> list[str]:
    """The recorded read with everything the vllm role manages as a deploy leaves it: directories,
    scripts, each instance's files, last good copies and ``serve.json``, units active and enabled,
    the image pulled, every instance serving."""
    got = parse_state(FACTS["state"])
    topology = vllmplan.topology_of(got)
    assert topology != "unknown"
    placed = place_host(config, topology, vllmplan.device_gids(got))
    assert isinstance(placed, HostPlacement)
    lines = [line for line in FACTS["state"] if '"end"' not in line and '"image"' not in line]
    lines += [
        _path(p, "dir", mode, user=user or "root", group=group or "root")
        for p, mode, user, group in vllmplan.directories(config)
    ]
    lines += [_path(f.path, "file", f.mode or "644", f.sha256) for f in vllmplan.script_files()]
    for instance in config.instances():
        files = last_good_of(instance.name)
        live = {path: name for name, path in files.live.items()}
        for want in vllmplan.wanted_instance(config, instance, placed):
            if isinstance(want, WantedFile):
                lines.append(_path(want.path, "file", want.mode or "644", want.sha256))
                lines.append(_path(files.saved(live[want.path]), "file", want.mode or "644", want.sha256))
            else:
                lines.append(
                    json.dumps(
                        {"kind": "unit", "unit": want.unit, "load": "loaded", "active": "active", "enabled": "enabled"}
                    )
                )
        record = serve_record(config, instance, placed.placements[instance.name]).encode()
        lines.append(_path(files.serve_json, "file", "644", hashlib.sha256(record).hexdigest()))
        lines.append(json.dumps({"kind": "ready", "key": instance.name, "rc": 0}))
    lines.append(json.dumps({"kind": "image", "image": IMAGE, "id": "sha256:" + "12" * 32}))
    return [*lines, '{"kind":"end"}']


class StandIn:
    """Stands in for :class:`rocmfleet.fleet.connect.Session`: per host address, ``state.sh``
    answers ``state`` (its lines) with ``state_rc``; ``vllm-status.sh`` and the ready probes answer
    as a host whose instances run :data:`IMAGE` and are ready. ``hosts[address] is None``: unreachable."""

    opened: list[str] = []
    hosts: dict[str, dict[str, Any] | None] = {}

    def __init__(self, address: str) -> None:
        self.address = address

    @classmethod
    def open(cls, settings: SshSettings, name: str | None = None) -> StandIn:
        cls.opened.append(settings.hostname)
        if cls.hosts[settings.hostname] is None:
            raise ConnectError(f"{settings.where}: Could not connect (stand-in)")
        return cls(settings.hostname)

    def run(self, command: str, timeout_s: float = 120, stdin: str | None = None) -> Result:
        host = self.hosts[self.address]
        assert host is not None
        words = shlex.split(command)
        if "=" in words[0]:  # PROBE_ANSWER_S=15 sh -c TEXT NAME ARGS...
            words = words[1:]
        script = words[3]  # sh -c TEXT NAME ARGS...
        if script == "state.sh":
            return Result(host.get("state_rc", 0), "\n".join(host["state"]).encode() + b"\n", b"state.sh: stand-in")
        if script == "vllm-status.sh":
            rows = [f"{n}\tactive\trunning\t{IMAGE}\t1970-01-01T00:10:00Z" for n in words[4:]]
            return Result(0, "\n".join(["now 1000", *rows]).encode() + b"\n", b"")
        assert script == "vllm-probe.sh", script
        return Result(0, b"", b"")

    def close(self) -> None:
        pass


@pytest.fixture
def fleet(monkeypatch, tmp_path):
    """Four hosts of lab-1's data: ``lab-1`` as recorded (nothing of the role yet), ``lab-2``
    converged, ``lab-3`` unreachable, ``lab-4`` whose ``state.sh`` fails."""
    StandIn.opened = []
    StandIn.hosts = {
        "10.213.0.11": {"state": FACTS["state"]},
        "10.213.0.12": {"state": converged(CONFIG)},
        "10.213.0.13": None,
        "10.213.0.14": {"state": ["sh: 1: state.sh: Permission denied"], "state_rc": 126},
    }
    targets = {f"lab-{i}": Target(f"lab-{i}", SshSettings(f"10.213.0.1{i}", user="root"), CONFIG) for i in range(1, 5)}
    monkeypatch.setattr(fleet_inventory, "load_targets", lambda inventory, limit=None, exclude=None: targets)
    monkeypatch.setattr(hoststeps, "Session", StandIn)
    monkeypatch.setenv(rstate.RESULTS_ENV, str(tmp_path / "results"))
    return targets


def by_host(rows):
    out: dict[str, list] = {}
    for row in rows:
        out.setdefault(row.host, []).append(row)
    return out


def test_each_rows_drift_is_the_plans_reasons_from_the_hosts_read(fleet):
    rows, state = fleet_status("inventories/lab.py", fleet, drift_rule())
    assert state is None
    hosts = by_host(rows)
    # nothing of the role on lab-1 yet: the plan's own reasons, as test_plans checks them in
    assert {r.instance: list(r.drift) for r in hosts["lab-1"]} == WHY
    assert hosts["lab-1"][0].drift[0] == "/etc/rocmfleet/vllm/tiny-llama-a.env: not reported by the read"
    assert all(r.ready and r.error is None and r.image == IMAGE for r in hosts["lab-1"])
    # lab-2 holds what the deploy writes: as wanted
    assert [(r.instance, r.drift, r.error) for r in hosts["lab-2"]] == [
        ("tiny-llama-a", (), None),
        ("tiny-llama-b", (), None),
    ]
    # unreachable: its one row, with the error and no drift
    (lost,) = hosts["lab-3"]
    assert lost.drift is None and lost.error.startswith("lab-3: ConnectError: root@10.213.0.13: Could not connect")
    # its read fails: the rows stay (image, ready), the drift is unknown and the error says why
    assert [(r.instance, r.ready, r.drift) for r in hosts["lab-4"]] == [
        ("tiny-llama-a", True, None),
        ("tiny-llama-b", True, None),
    ]
    assert all(r.error == "lab-4: state.sh exited 126: state.sh: stand-in" for r in hosts["lab-4"])
    # one connection per host per command: status, probes and the read share it
    assert sorted(StandIn.opened) == [f"10.213.0.1{i}" for i in range(1, 5)]


def test_an_edited_file_on_a_converged_host_is_its_instances_drift_alone(fleet):
    env = "/etc/rocmfleet/vllm/tiny-llama-a.env"
    lines = converged(CONFIG)
    edited = [line.replace('"sha256": "', '"sha256": "00', 1) if f'"{env}"' in line else line for line in lines]
    StandIn.hosts["10.213.0.12"] = {"state": edited}
    rows, _ = fleet_status("inventories/lab.py", fleet, drift_rule())
    drift = {r.instance: r.drift for r in by_host(rows)["lab-2"]}
    assert drift["tiny-llama-b"] == ()
    # its last good copy still holds what the file should: the edit is the one drift
    (content,) = drift["tiny-llama-a"]
    assert content.startswith(f"{env}: content 00") and ", want " in content


def test_a_read_without_its_topology_leaves_the_drift_unknown(fleet):
    StandIn.hosts["10.213.0.12"] = {"state": [line for line in converged(CONFIG) if '"gpu-topology"' not in line]}
    rows, _ = fleet_status("inventories/lab.py", fleet, drift_rule())
    lab2 = by_host(rows)["lab-2"]
    assert [r.drift for r in lab2] == [None, None]
    assert lab2[0].error == "lab-2: the read holds no run of the GPU topology script"


def test_the_json_rows_keep_their_keys_and_add_the_drift(fleet):
    rows, state = fleet_status("inventories/lab.py", fleet, drift_rule())
    data = json.loads(status_json([r.row() for r in rows], state))["instances"]
    assert all(set(row) == KEYS | {"drift"} for row in data)
    first = {row["host"]: row for row in reversed(data)}  # each host's first row
    assert first["lab-1"]["drift"] == WHY["tiny-llama-a"]
    assert first["lab-2"] == {
        "host": "lab-2",
        "instance": "tiny-llama-a",
        "unit": "active/running",
        "image": IMAGE,
        "ready": True,
        "not_ready": None,
        "uptime_s": 400,
        "error": None,
        "drift": [],
    }
    assert first["lab-3"]["drift"] is None and first["lab-3"]["error"]
    assert first["lab-4"]["drift"] is None


def test_the_table_has_a_drift_column(fleet, capsys, monkeypatch):
    from rocmfleet import entry

    monkeypatch.setenv("COLUMNS", "60")  # a narrow terminal's width; captured output is no terminal: no cell is cut
    code = entry.main(["status", "inventories/lab.py"])
    out = capsys.readouterr().out
    assert code == 1  # lab-3 and lab-4 have errors
    assert "…" not in out
    header, *lines, summary = [line for line in out.splitlines() if line.strip()]
    assert summary.startswith("4 host(s), ") and summary.endswith("host(s) unreadable"), summary
    assert header.split() == ["host", "instance", "unit", "image", "ready", "uptime", "rollout", "step", "drift"]
    at = header.index("drift")  # the table's columns are aligned
    rows = {tuple(line.split()[:2]): line[at:].strip() for line in lines}
    assert rows[("lab-1", "tiny-llama-a")] == "7 to change"
    assert rows[("lab-2", "tiny-llama-b")] == "as wanted"
    assert rows[("lab-4", "tiny-llama-a")] == "lab-4: state.sh exited 126: state.sh: stand-in"  # the drift read's
    assert IMAGE in next(line for line in lines if line.split()[:2] == ["lab-4", "tiny-llama-a"])  # the image stays
    assert drift_cell(None) == "-" and drift_cell([]) == "as wanted" and drift_cell(["x"]) == "1 to change"


def test_every_roles_drift_comes_from_the_same_one_read_per_host(fleet, capsys):
    """The host's plan (``rocmfleet.plan.hostdrift``) is read in the same ``state.sh`` command as the
    instances' drift: lab-2's read holds the vllm role's items only, so every other role's items are
    not reported (drift), in role order; unreachable and unreadable hosts have none (``null``)."""
    from rocmfleet import entry
    from rocmfleet.fleet.rollout.report import host_drift

    rows, state = fleet_status("inventories/lab.py", fleet, drift_rule())
    hosts = host_drift(rows)
    lab2 = hosts["lab-2"]["drift"]
    assert list(lab2) == ["base", "rocm", "tuning", "exporter", "docker", "vllm"]
    assert "/etc/apt/apt.conf.d/80rocmfleet-lock-timeout: not reported by the read" in lab2["base"]
    assert not any(line.startswith("/etc/rocmfleet/vllm/tiny-llama-a.env") for line in lab2["vllm"])
    assert hosts["lab-3"]["drift"] is None and hosts["lab-4"]["drift"] is None
    assert sorted(StandIn.opened) == [f"10.213.0.1{i}" for i in range(1, 5)]  # still one connection each
    data = json.loads(status_json([r.row() for r in rows], state, hosts))
    assert data["hosts"]["lab-2"]["drift"] == lab2 and all(set(row) == KEYS | {"drift"} for row in data["instances"])
    assert entry.main(["status", "inventories/lab.py"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "lab-2  base: /etc/apt/apt.conf.d/80rocmfleet-lock-timeout: not reported by the read" in out
    assert out[-1].endswith("; 2 host(s) with drift, 1 host(s) unreadable"), out[-1]
    assert not any(line.startswith(("lab-3  ", "lab-4  ")) and ": not reported" in line for line in out)
