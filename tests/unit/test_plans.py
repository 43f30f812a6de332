"""Plans from recorded facts against checked-in expectations (``tests/fixtures/plans/<case>/``),
the way pyinfra's operation tests compare ``args + facts -> commands``.

Each case holds ``facts.json`` (the host's data and the ``HostState`` read, ``state.sh``'s lines,
GPU topology included) and ``expected.json`` (:func:`rocmfleet.plan.vllmplan.plan_dict` of the
plan): the placement, every instance's rendered environment file and unit, and why it is dirty.
``ROCMFLEET_WRITE_PLANS=1`` rewrites the expectations (review the diff: it is the change on hosts).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rocmfleet.config.settings import HostConfig, host_config
from rocmfleet.facts.state import parse_state
from rocmfleet.plan import hostdrift, vllmplan
from rocmfleet.plan.build import plan_host
from rocmfleet.plan.drift import drift
from rocmfleet.plan.instance import HostPlacement, place_host

PLANS = Path(__file__).resolve().parents[1] / "fixtures" / "plans"
CASES = sorted(p.name for p in PLANS.iterdir() if (p / "facts.json").is_file())


def planned(case: str) -> tuple[dict[str, object], vllmplan.VllmPlan, object]:
    facts = json.loads((PLANS / case / "facts.json").read_text())
    profiles = PLANS / case / facts["profiles"] if "profiles" in facts else None
    config = host_config(facts["data"], profiles) if profiles else host_config(facts["data"])
    if "state_from" in facts:  # the same recorded read as another case
        facts["state"] = json.loads((PLANS / facts["state_from"] / "facts.json").read_text())["state"]
    got = parse_state(facts["state"])
    topology = vllmplan.topology_of(got)
    assert topology != "unknown", f"{case}: the recorded topology does not parse"
    todo = hostdrift.vllm_plan(facts["host"], config, topology, got, planner=plan_host)
    return vllmplan.plan_dict(config, todo), todo, config


@pytest.mark.parametrize("case", CASES)
def test_plan_from_recorded_facts_is_the_expected_one(case):
    found, _, _ = planned(case)
    expected = PLANS / case / "expected.json"
    if os.environ.get("ROCMFLEET_WRITE_PLANS"):
        expected.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    assert found == json.loads(expected.read_text())


def test_the_cases_cover_a_placed_host_and_a_refused_one():
    lab, todo, _ = planned("lab-1")
    assert isinstance(todo.placed, HostPlacement) and todo.dirty == ["tiny-llama-a", "tiny-llama-b"]
    refused, todo, _ = planned("mi308x-8gpu-cpx")
    assert isinstance(todo.placed, str) and "compute partition CPX" in todo.placed
    assert all(i["why"] == ["no placement before execution"] for i in refused["instances"].values())  # type: ignore[attr-defined]
    _, todo, _ = planned("mi308x-8gpu-cpx-tp1")  # the same host, a profile opted into CPX
    assert isinstance(todo.placed, HostPlacement)
    assert [p.gpus for p in todo.placed.placements.values()] == [(i,) for i in range(0, 32, 4)]


def test_a_host_that_holds_the_rendered_files_has_no_drift_in_them():
    facts = json.loads((PLANS / "lab-1" / "facts.json").read_text())
    config = host_config(facts["data"])
    got = parse_state(facts["state"])
    topology = vllmplan.topology_of(got)
    assert topology != "unknown"
    placed = place_host(config, topology, vllmplan.device_gids(got))
    assert isinstance(placed, HostPlacement)
    wanted = [w for i in config.instances() for w in vllmplan.wanted_instance(config, i, placed)]
    before = {str(d) for d in drift(wanted, got)}
    assert "/etc/rocmfleet/vllm/tiny-llama-a.env: not reported by the read" in before
    lines = [line for line in facts["state"] if '"end"' not in line]
    for want in wanted:
        if hasattr(want, "content"):
            item = {"kind": "path", "path": want.path, "type": "file", "mode": want.mode or "644"}
            item |= {"user": want.user or "root", "group": want.group or "root", "gid": "0", "sha256": want.sha256}
            lines.append(json.dumps(item))
        else:
            lines.append(
                json.dumps(
                    {"kind": "unit", "unit": want.unit, "load": "loaded", "active": "active", "enabled": "enabled"}
                )
            )
    assert drift(wanted, parse_state([*lines, '{"kind":"end"}'])) == []
    # one byte, one mode, one state off: each its own drift
    changed = [
        line.replace('"mode": "600"', '"mode": "644"', 1) if "tiny-llama-b.env" in line else line for line in lines
    ]
    changed = [
        line.replace('"active": "active"', '"active": "failed"') if "tiny-llama-a.service" in line else line
        for line in changed
    ]
    assert [str(d) for d in drift(wanted, parse_state([*changed, '{"kind":"end"}']))] == [
        "vllm-tiny-llama-a.service: active failed, want active",
        "/etc/rocmfleet/vllm/tiny-llama-b.env: mode 644, want 600",
    ]


def test_the_check_asserts_no_drift_with_the_deploys_renderer():
    """``fleet/check/test_vllm.py``'s files check, on the lab case's read and the host's plan made on
    it (as ``rocmfleet check``'s control side makes it): not read is an error, a host holding the
    rendered files passes, a changed environment file fails, and an instance the plan could not
    place fails naming why."""
    import dataclasses

    from rocmfleet.domain.tooloutput import CannotCheck
    from rocmfleet.fleet.check import expect
    from rocmfleet.fleet.check import test_vllm as check
    from rocmfleet.plan import hostdrift

    facts = json.loads((PLANS / "lab-1" / "facts.json").read_text())
    config = host_config(facts["data"])
    got = parse_state(facts["state"])
    plan = plan_host("plan-case", config, hostdrift.read_facts(got))
    assert plan.checks is not None and plan.instances
    instance = plan.checks.instances[0]
    expect._memo[("plan-case", "state")] = got
    try:
        with pytest.raises(CannotCheck, match="not reported by the read"):
            check.test_instance_files_as_wanted("plan-case", plan, instance)
        placed = place_host(config, vllmplan.topology_of(got), vllmplan.device_gids(got))
        assert isinstance(placed, HostPlacement)
        lines = [line for line in facts["state"] if '"end"' not in line]
        for want in vllmplan.wanted_instance(config, config.instances()[0], placed)[:3]:
            sha = getattr(want, "sha256", "")
            item = {"kind": "path", "path": want.path, "type": "file", "mode": want.mode, "user": "root"}
            lines.append(json.dumps({**item, "group": "root", "gid": "0", "sha256": sha}))
        expect._memo[("plan-case", "state")] = parse_state([*lines, '{"kind":"end"}'])
        check.test_instance_files_as_wanted("plan-case", plan, instance)
        env = instance.env_file
        edited = [line.replace('"sha256": "', '"sha256": "00', 1) if env in line else line for line in lines]
        expect._memo[("plan-case", "state")] = parse_state([*edited, '{"kind":"end"}'])
        with pytest.raises(AssertionError, match=f"{env}: content"):
            check.test_instance_files_as_wanted("plan-case", plan, instance)
        unplaced = dataclasses.replace(plan, instances=(), problem="placement: fewer GPUs than the data names")
        with pytest.raises(AssertionError, match="placement: fewer GPUs than the data names"):
            check.test_instance_files_as_wanted("plan-case", unplaced, instance)
        unread = dataclasses.replace(plan, topology_source="not read from the host: timed out")
        with pytest.raises(CannotCheck, match="without the host's facts: not read from the host: timed out"):
            check.test_instance_files_as_wanted("plan-case", unread, instance)
    finally:
        expect._memo.pop(("plan-case", "state"), None)


def test_dry_says_each_instance_to_change_with_the_plans_reasons_and_each_orphan():
    _, todo, config = planned("lab-1")
    assert isinstance(config, HostConfig)
    lines = vllmplan.dry_lines(todo, config.image.reference)
    assert lines[:2] == [f"would change vllm instance {n}: {'; '.join(todo.why[n])}" for n in todo.dirty]
    assert lines[0].startswith(
        "would change vllm instance tiny-llama-a: /etc/rocmfleet/vllm/tiny-llama-a.env: not reported by the read; "
        "/etc/systemd/system/vllm-tiny-llama-a.service: not reported by the read; "
    )
    assert lines[0].endswith("; serve.json differs; not serving (vllm-probe.sh live exit None)")
    assert lines[2:] == [
        f"would pull vllm image {config.image.reference} (not on the host)",
        "would create or fix /etc/rocmfleet/vllm, /var/cache/vllm, /var/cache/huggingface, /usr/local/lib/rocmfleet, "
        "/usr/local/lib/rocmfleet/vllm-unit.sh, /usr/local/lib/rocmfleet/gpu_free.py (vllm role)",
    ]
    gone = vllmplan.VllmPlan(orphans=["old-x"], image_missing=False)
    assert vllmplan.dry_lines(gone, config.image.reference) == [
        "would remove vllm instance old-x (no longer in the data)"
    ]
    assert vllmplan.dry_lines(vllmplan.VllmPlan(image_missing=False), config.image.reference) == []


def test_instance_drift_is_the_plans_reasons_per_instance_and_refuses_a_read_without_topology():
    _, todo, config = planned("lab-1")
    assert isinstance(config, HostConfig)
    facts = json.loads((PLANS / "lab-1" / "facts.json").read_text())
    assert hostdrift.instance_drift(config, parse_state(facts["state"]), "lab-1", planner=plan_host) == todo.why
    failed = [line.replace('"rc": 0', '"rc": 124') if '"ran"' in line else line for line in facts["state"]]
    with pytest.raises(ValueError, match="the GPU topology script exited 124"):
        hostdrift.instance_drift(config, parse_state(failed), "lab-1", planner=plan_host)


def test_a_renamed_neighbour_leaves_an_instance_s_files_as_they_were():
    # lab-1's tiny-llama-b renamed tiny-llama-c, same port and GPU: tiny-llama-a's env file and
    # unit are unchanged (its unit once named its neighbours, and the rename restarted it).
    facts = json.loads((PLANS / "lab-1" / "facts.json").read_text())
    got = parse_state(facts["state"])

    def files_of_a(second: str) -> object:
        data = {
            **facts["data"],
            "vllm_instances": [
                {"name": "tiny-llama-a", "port": 8000, "gpus": [0]},
                {"name": second, "port": 8001, "gpus": [1]},
            ],
        }
        config = host_config(data)
        topology = vllmplan.topology_of(got)
        assert topology != "unknown"
        todo = hostdrift.vllm_plan(facts["host"], config, topology, got, planner=plan_host)
        return vllmplan.plan_dict(config, todo)["instances"]["tiny-llama-a"]["files"]  # type: ignore[index]

    assert files_of_a("tiny-llama-b") == files_of_a("tiny-llama-c")
