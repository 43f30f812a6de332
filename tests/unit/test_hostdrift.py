"""Every role's drift from the plan's one rule (:mod:`rocmfleet.plan.hostdrift`), as ``rocmfleet
status``, the deploy's ``--dry`` and ``rocmfleet check``'s ``drift`` module say it: given lab-1's
recorded read (``tests/fixtures/plans/lab-1/facts.json``: its GPU topology and device nodes) with
every item of its plan as the deploy leaves it, then one file of each role edited by hand.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rocmfleet.config.settings import host_config
from rocmfleet.domain import exporter, rocm, tuning
from rocmfleet.domain.tooloutput import CannotCheck
from rocmfleet.facts.state import parse_state
from rocmfleet.fleet.check import test_drift as drift_check
from rocmfleet.fleet.rollout.instancestatus import InstanceStatus
from rocmfleet.fleet.rollout.report import host_drift, host_drift_lines, status_json
from rocmfleet.plan import baseplan, hostdrift, vllmplan
from rocmfleet.plan.build import plan_host
from rocmfleet.plan.drift import WantedAbsent, WantedDir, WantedPackage, WantedUnit, plan_wanted
from rocmfleet.plan.model import HostPlan
from rocmfleet.plan.roleitems import DAEMON_JSON

CASE = Path(__file__).resolve().parents[1] / "fixtures" / "plans" / "lab-1"
FACTS = json.loads((CASE / "facts.json").read_text())
CONFIG = host_config(FACTS["data"])
OS = {"kind": "os", "id": "debian", "version_id": "12", "codename": "bookworm", "kernel": "6.1.0-28-amd64"}
#: One file of each role, as the lab test edits them by hand (tests/e2e/test_check.py).
EDITED = {
    "base": baseplan.APT_LOCK_FILE,
    "rocm": rocm.UDEV_RULE,
    "tuning": tuning.SYSCTL_FILE,
    "exporter": exporter.CONFIG_FILE,
    "docker": DAEMON_JSON,
    "vllm": "/etc/rocmfleet/vllm/tiny-llama-a.env",
}


def as_wanted(plan: HostPlan) -> list[str]:
    """``HostState`` lines of a host holding every item of ``plan`` as the deploy leaves it."""
    lines = []
    for want in plan_wanted(plan):
        if isinstance(want, WantedUnit):
            line = {"kind": "unit", "unit": want.unit, "load": "loaded", "active": "active", "enabled": "enabled"}
        elif isinstance(want, WantedPackage):
            version = want.version.replace("*", "1") if want.version else "1.0"
            line = {"kind": "pkg", "package": want.name, "status": "hi " if want.held else "ii ", "version": version}
        elif isinstance(want, WantedAbsent):
            line = {"kind": "path", "path": want.path, "type": "missing"}
        else:
            kind = "dir" if isinstance(want, WantedDir) else "file"
            owner = {"user": want.user or "root", "group": want.group or "root"}
            sha = getattr(want, "sha256", "")
            line = {"kind": "path", "path": want.path, "type": kind, "mode": want.mode or "644", **owner, "sha256": sha}
        lines.append(json.dumps(line))
    return lines


def read(edit: dict[str, str] | None = None) -> list[str]:
    """lab-1's recorded read, its OS, and every item of its plan as wanted; each path of ``edit``'s
    values with another content."""
    recorded = [line for line in FACTS["state"] if '"end"' not in line]
    plan = hostdrift.host_plan(
        "lab-1", CONFIG, parse_state([*recorded, json.dumps(OS), '{"kind":"end"}']), planner=plan_host
    )
    lines = [*recorded, json.dumps(OS), *as_wanted(plan)]
    edited = set((edit or {}).values())
    out = []
    for line in lines:
        item = json.loads(line)
        if item.get("path") in edited:
            item["sha256"] = "0" * 64
        out.append(json.dumps(item))
    return [*out, '{"kind":"end"}']


def test_the_read_asks_every_item_of_the_plan_and_the_facts_it_is_planned_on():
    asked = hostdrift.read_query(CONFIG, planner=plan_host)
    plan = hostdrift.host_plan("lab-1", CONFIG, parse_state(read()), planner=plan_host)
    assert {f.path for f in plan.files} | {r.path for r in plan.removals} <= set(asked["paths"])
    assert {u.unit for u in plan.units} <= set(asked["units"])
    assert "linux-headers-*" in asked["packages"] and asked["os"] is True
    assert asked["runs"] == [(vllmplan.TOPOLOGY_RUN, vllmplan.topology_script.SCRIPT)]
    assert asked["globs"] == [vllmplan.DEVICE_GLOB] and "/dev/kfd" in asked["paths"]


def test_the_plan_on_a_read_is_the_plan_on_the_same_facts_recorded():
    got = parse_state(read())
    facts = hostdrift.read_facts(got)
    assert facts.source == hostdrift.READ_SOURCE and facts.assumed == ()
    assert (facts.device_gids, facts.os_codename, facts.kernel) == ((992,), "bookworm", "6.1.0-28-amd64")
    assert facts.topology == vllmplan.topology_of(got)
    plan = hostdrift.host_plan("lab-1", CONFIG, got, planner=plan_host)
    assert plan == plan_host("lab-1", CONFIG, facts) and not plan.problem and len(plan.instances) == 2
    assert "linux-headers-6.1.0-28-amd64" in {p.name for p in plan.packages}
    # a read without the topology: nothing placed, said; the facts it lacks are assumed
    bare = parse_state([line for line in read() if "gpu-topology" not in line and '"os"' not in line])
    assert hostdrift.read_facts(bare).assumed == ("os",)
    assert hostdrift.host_plan("lab-1", CONFIG, bare, planner=plan_host).instances == ()


def test_a_converged_host_has_no_drift_and_dry_says_nothing():
    got = parse_state(read())
    drifts = hostdrift.role_drift(hostdrift.host_plan("lab-1", CONFIG, got, planner=plan_host), got)
    assert list(drifts) == ["base", "rocm", "tuning", "exporter", "docker", "vllm"]
    assert all(found == [] for found in drifts.values())
    assert hostdrift.dry_lines("lab-1", CONFIG, got, planner=plan_host) == []


def test_one_file_of_each_role_edited_is_that_roles_drift_in_dry_and_status():
    got = parse_state(read(EDITED))
    lines = hostdrift.dry_lines("lab-1", CONFIG, got, planner=plan_host)
    assert [line.split(": ")[0:2] for line in lines] == [[f"drift {role}", path] for role, path in EDITED.items()]
    assert all(": content 000000000000..., want " in line for line in lines)
    plan = hostdrift.host_plan("lab-1", CONFIG, got, planner=plan_host)
    roles = hostdrift.as_dict(hostdrift.role_drift(plan, got))
    row = InstanceStatus("lab-1", "tiny-llama-a", "active", "running", "img", True, 1.0, None, (), None)
    rows = [dataclasses.replace(row, roles=tuple((r, tuple(w)) for r, w in roles.items())), row]
    rows.append(InstanceStatus("lab-9", "-", "unknown", "unknown", None, None, None, "lab-9: could not connect"))
    assert host_drift_lines(rows) == [f"lab-1  {line.removeprefix('drift ')}" for line in lines]
    data = json.loads(status_json([r.row() for r in rows], None, host_drift(rows)))
    assert data["hosts"]["lab-1"] == {"drift": roles, "problem": ""}
    assert data["hosts"]["lab-9"] == {"drift": None, "problem": ""}  # unreachable: its own outcome, in its row
    assert set(data["instances"][0]) == {*row.row()} and "roles" not in data["instances"][0]


def test_the_check_fails_each_role_naming_its_items_but_those_another_check_asserts():
    got = parse_state(read(EDITED))
    plan = hostdrift.host_plan("lab-1", CONFIG, got, planner=plan_host)
    messages = {}
    for role in hostdrift.ROLES:
        found = hostdrift.role_drift(hostdrift.role_items(plan, role), got)[role]
        messages[role] = drift_check.failure(plan, found, drift_check.covered(plan, role))
    for role in ("base", "rocm", "docker", "exporter"):
        assert messages[role] == f"{EDITED[role]}: content 000000000000..., want " + messages[role].split("want ")[1]
    # the sysctl file and the instance's env file: tuning::numa_balancing_persisted's and
    # vllm::instance_files_as_wanted's (one fault, one failed check)
    assert messages["tuning"] is None and messages["vllm"] is None
    assert drift_check.failure(plan, [], set()) is None
    packages_only = parse_state([line for line in read() if '"pkg"' in line or '"end"' in line])
    unread = hostdrift.role_drift(plan, packages_only)["base"]
    with pytest.raises(CannotCheck, match="the read could not tell"):
        drift_check.failure(plan, unread, set())


def test_the_drift_check_runs_on_the_plan_it_is_given_and_reads_its_items_only():
    """``drift::role_as_wanted[ROLE]`` takes the plan the control side made (never the configuration):
    its read asks the plan's items (:func:`rocmfleet.plan.drift.query`), a plan made without the host's
    facts is an error, and each role fails naming its edited file."""
    import dataclasses

    from rocmfleet.fleet.check import expect

    got = parse_state(read(EDITED))
    plan = hostdrift.host_plan("drift-case", CONFIG, got, planner=plan_host)
    expect._memo[("drift-case", "plan-state")] = got
    try:
        assert drift_check.plan_read("drift-case", plan) is got
        for role in ("base", "rocm", "docker", "exporter"):
            with pytest.raises(AssertionError, match=EDITED[role]):
                drift_check.test_role_as_wanted("drift-case", plan, role)
        drift_check.test_role_as_wanted("drift-case", plan, "vllm")  # vllm::instance_files_as_wanted's
        unread = dataclasses.replace(plan, topology_source="not read from the host: refused")
        with pytest.raises(CannotCheck, match="without the host's facts"):
            drift_check.test_role_as_wanted("drift-case", unread, "base")
    finally:
        expect._memo.pop(("drift-case", "plan-state"), None)


def test_the_deploys_one_read_asks_the_plans_items_only_for_dry():
    """``pyinfra ... --dry`` merges the plan's query into the deploy's one read (no second fact, no
    operation); under ``-y`` the read is the roles' alone, which holds every item of the plan."""
    from rocmfleet import converge

    plain, dry = converge.read_query(CONFIG, False), converge.read_query(CONFIG, True)
    asked = hostdrift.read_query(CONFIG, planner=plan_host)
    assert set(dry) == set(plain) | set(asked)
    for key in ("paths", "packages", "units", "globs", "runs"):
        assert set(plain.get(key, [])) <= set(dry[key]) and set(asked[key]) <= set(dry[key])
    assert [p for p in dry["paths"] if p in plain["paths"]] == plain["paths"]  # the roles' items first, in order
    # the roles apply their plan items' drift: the read under -y already asks every item's path
    # and unit (an unread item would drift at every converge)
    assert set(asked["paths"]) - set(plain["paths"]) == set()
    assert set(asked["units"]) - set(plain["units"]) == set()
    assert set(asked["packages"]) - set(plain["packages"]) == set()


def test_the_rocm_roles_check_leaves_to_the_drift_check_what_it_says():
    """``rocm::rocm_role_as_wanted`` keeps what the plan cannot say (versions from AMD's repositories,
    the keyrings against AMD's keys, DKMS, reboots, the driver); the role's files, kernel headers and
    the driver's holds are ``drift::role_as_wanted[rocm]``'s: one fault, one failed check."""
    from rocmfleet.fleet.check.test_rocm import SAID_BY_DRIFT

    said = [f"{rocm.UDEV_RULE} differs", "kernel headers missing", "amdgpu-dkms not held (apt-mark hold)"]
    kept = [
        f"{rocm.LEGACY_KEYRING} differs from the published key, or is not mode 644",
        "amdgpu-dkms not at the version of https://repo.radeon.com/amdgpu/31.50/ubuntu",
        "a reboot is owed: amdgpu driver 31.50 installed",
    ]
    assert [r for r in said + kept if not SAID_BY_DRIFT.match(r)] == kept
