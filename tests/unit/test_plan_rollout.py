"""``rocmfleet plan --image``: the rollout's batches offline, on the 24-host test site
(tests/fixtures/sites/rack24), computed as ``rocmfleet rollout --dry`` computes them (the same
lines, option for option), with every socket connect and name lookup refused."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from rocmfleet import entry
from tests.unit import test_rollout_services
from tests.unit.test_rollout_services import IMAGE, QWEN, SCOUT, SERVICE_OF

# the fixtures: every socket connect and name lookup refused; copies of the site; rollout --dry
offline, site, fleet_wide, dry = (
    test_rollout_services.offline,
    test_rollout_services.site,
    test_rollout_services.fleet_wide,
    test_rollout_services.dry,
)

NOT_RESOLVED = "digest not resolved: rocmfleet plan does not connect"


@pytest.fixture
def plan(capsys):
    """``rocmfleet plan SITE OPTIONS`` -> (exit status, stdout, stderr)."""

    def run(where: Path, *options: str) -> tuple[int, str, str]:
        code = entry.main(["plan", str(where / "inventory.py"), *options])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def batches(out: str) -> list[tuple[bool, list[tuple[str, str]]]]:
    """The rollout part's ``plan:`` line as ``[(canary?, [(host, service)])]``."""
    return test_rollout_services.batches("\n".join(line.strip() for line in out.splitlines()))


def rollout_lines(out: str) -> list[str]:
    """The lines ``rollout --dry`` prints of its plan: services, canary, batches."""
    return [line.strip() for line in out.splitlines() if line.strip().startswith(("services: ", "canary: ", "plan: "))]


@pytest.mark.parametrize(
    ("fixture", "options"),
    [
        ("fleet_wide", ["--max-unavailable", "25%"]),
        ("fleet_wide", ["--max-unavailable", "1", "--canary", "2"]),
        ("fleet_wide", ["--max-unavailable", "3", "--canary-group", "canary"]),
        ("fleet_wide", ["--canary", "0", "--max-unavailable", "50%"]),
        ("site", ["--group", "rack_a", "--max-unavailable", "25%"]),
        ("site", ["--group", "rack_c", "--canary-group", "rack_c", "--max-unavailable", "2"]),
    ],
)
def test_the_batches_are_rollout_dry_s(fixture, options, request, offline, plan, dry):
    where = request.getfixturevalue(fixture)
    code, out, err = plan(where, "--image", IMAGE, *options)
    assert code == 0, err
    dry_code, dry_out, dry_err = dry(where, "--image", IMAGE, *options)
    assert dry_code == 0, dry_err
    assert rollout_lines(out) == rollout_lines(dry_out) and rollout_lines(out)
    assert f"rollout of {IMAGE} ({NOT_RESOLVED})" in out
    assert "Traceback" not in err and f"rollout of {IMAGE} in " in err


@pytest.mark.parametrize(("option", "bounds"), [("1", {QWEN: 1, SCOUT: 1}), ("25%", {QWEN: 4, SCOUT: 2})])
def test_each_service_bound_holds_and_the_canary_is_one_replica_of_each(
    fleet_wide,
    offline,
    plan,
    option,
    bounds,
):
    code, out, err = plan(fleet_wide, "--image", IMAGE, "--max-unavailable", option)
    assert code == 0, err
    planned = batches(out)
    assert sorted(h for _c, b in planned for h, _s in b) == sorted(SERVICE_OF)  # every host once
    for _canary, batch in planned:
        counts = Counter(service for _h, service in batch)
        assert all(counts[s] <= bounds[s] for s in counts), (option, batch)
        assert all(SERVICE_OF[h] == s for h, s in batch)
    assert planned[0][0] and Counter(s for _h, s in planned[0][1]) == {QWEN: 1, SCOUT: 1}
    assert not any(c for c, _b in planned[1:])
    assert offline == []


def test_the_canary_group_is_honoured(fleet_wide, offline, plan):
    code, out, err = plan(fleet_wide, "--image", IMAGE, "--canary-group", "canary", "--max-unavailable", "25%")
    assert code == 0, err
    assert batches(out)[0] == (True, [("ra-01", QWEN), ("ra-07", SCOUT)])
    said = f"canary (batch 1): ra-01 (1 replica of {QWEN}), ra-07 (1 replica of {SCOUT}); why: the hosts of group"
    assert said in out


def test_a_racks_pin_rolls_that_rack_only(site, offline, plan):
    before = {p.name: p.read_text() for p in (site / "group_vars").iterdir()}
    code, out, err = plan(site, "--image", IMAGE, "--group", "rack_a", "--max-unavailable", "25%")
    assert code == 0, err
    planned = batches(out)
    assert sorted(h for _c, b in planned for h, _s in b) == [f"ra-{i:02d}" for i in range(1, 9)]
    assert planned[0] == (True, [("ra-01", QWEN), ("ra-07", SCOUT)])
    assert "group_vars/rack_a.yml (group rack_a's pin); 8 host(s) switch" in out
    assert {p.name: p.read_text() for p in (site / "group_vars").iterdir()} == before  # nothing written
    # every host is still planned (the rollout covers rack_a's)
    assert out.count("\nhost ") == 24 and offline == []


def test_json_holds_the_batches_and_both_outputs_are_the_same_bytes_twice(site, offline, plan):
    options = ("--image", IMAGE, "--group", "rack_b", "--max-unavailable", "25%")
    texts = [plan(site, *options)[1] for _ in range(2)]
    assert texts[0] == texts[1]
    outputs = [plan(site, *options, "--json") for _ in range(2)]
    assert outputs[0] == outputs[1] and outputs[0][0] == 0
    rollout = json.loads(outputs[0][1])["rollout"]
    assert rollout["batches"] == [["rb-01", "rb-05"], ["rb-02", "rb-03", "rb-06", "rb-07", "rb-08"], ["rb-04"]]
    assert rollout["canary_batches"] == 1 and rollout["canary_hosts"] == ["rb-01", "rb-05"]
    assert rollout["digest"] == NOT_RESOLVED.removeprefix("digest ") and rollout["group"] == "rack_b"
    assert {s["service"]: (s["replicas"], s["max_unavailable"]) for s in rollout["services"]} == {
        QWEN: (16, 4),
        SCOUT: (8, 2),
    }
    assert offline == []


def test_a_given_digest_is_shown_not_checked(fleet_wide, offline, plan):
    digest = "sha256:" + "c" * 64
    code, out, _err = plan(fleet_wide, "--image", f"{IMAGE}@{digest}")
    assert code == 0 and f"rollout of {IMAGE}@{digest} (digest {digest})" in out and offline == []


def test_without_image_there_is_no_rollout(fleet_wide, offline, plan):
    code, out, err = plan(fleet_wide, "--json")
    assert code == 0 and json.loads(out)["rollout"] is None and "rollout of" not in err


@pytest.mark.parametrize(
    ("fixture", "options", "said"),
    [
        ("site", ["--image", IMAGE], "the image is pinned per group"),
        ("fleet_wide", ["--image", IMAGE, "--canary", "1", "--canary-group", "canary"], "give one of them"),
        ("fleet_wide", ["--image", IMAGE, "--max-unavailable", "0"], "--max-unavailable 0: expected a count"),
        ("fleet_wide", ["--image", IMAGE, "--max-unavailable", "20"], "more than any service has"),
        ("fleet_wide", ["--image", IMAGE, "--canary", "9"], "--canary 9: replicas of each service in the canary"),
        ("fleet_wide", ["--image", IMAGE, "--canary-group", "canaries"], "--canary-group canaries: no host of"),
        ("site", ["--image", IMAGE, "--group", "qwen"], "--group qwen: no group file of it sets vllm_image_*"),
        ("site", ["--image", IMAGE, "--group", "rack_b", "--canary-group", "canary"], "none of its hosts"),
        ("fleet_wide", ["--image", IMAGE, "--limit", "rack_a"], "--image with --limit: "),
        ("fleet_wide", ["--canary-group", "canary"], "--canary-group without --image"),
        ("fleet_wide", ["--group", "rack_a", "--max-unavailable", "2"], "--group, --max-unavailable without --image"),
    ],
)
def test_rollouts_refusals_exit_2_before_any_connection(fixture, options, said, request, offline, plan):
    code, out, err = plan(request.getfixturevalue(fixture), *options)
    assert code == 2 and out == "" and "Traceback" not in err
    assert said in err, err
    assert err.endswith("rocmfleet plan: nothing planned (exit 2)\n")
    assert offline == []


def test_a_malformed_image_is_refused_by_the_parser(fleet_wide, offline, capsys):
    with pytest.raises(SystemExit) as exited:  # argparse's exit, as for rollout --image
        entry.main(["plan", str(fleet_wide / "inventory.py"), "--image", "Registry/UPPER:tag"])
    assert exited.value.code == 2 and "argument --image: repository 'Registry/UPPER': must be lower case" in (
        capsys.readouterr().err
    )


def test_a_host_whose_image_another_group_pins_is_left_out_as_by_rollout(site, offline, plan, dry):
    # ra-01 in rack_a and rack_b: rack_b's pin wins, so an edit of rack_a.yml leaves it as it is;
    # rollout leaves it out (rocmfleet.fleet.rollout.fleetimage.pinned_hosts), and so does the plan
    inventory = site / "inventory.py"
    inventory.write_text(
        inventory.read_text().replace(
            'rack_b = ([h for h in _HOSTS if h.startswith("rb-")]',
            'rack_b = (["ra-01"] + [h for h in _HOSTS if h.startswith("rb-")]',
        )
    )
    code, out, err = plan(site, "--image", IMAGE, "--group", "rack_a")
    assert code == 0, err
    assert sorted(h for _c, b in batches(out) for h, _s in b) == [f"ra-{i:02d}" for i in range(2, 9)]
    said = "ra-01: in rack_a, but its image is pinned elsewhere (a later group or its own data: "
    assert f"  {said}registry.example.invalid/vllm:0.33.0-r2@sha256:{'2' * 64}): left out" in out
    assert "(group rack_a's pin); 7 host(s) switch" in out
    code, as_json, err = plan(site, "--image", IMAGE, "--group", "rack_a", "--json")
    assert code == 0, err
    rollout = json.loads(as_json)["rollout"]
    assert "ra-01" not in rollout["hosts"] and rollout["lines"][0].startswith(said)
    assert offline == []  # the plan connects to nothing; rollout --dry tries (refused here)
    dry_code, dry_out, dry_err = dry(site, "--image", IMAGE, "--group", "rack_a")
    assert dry_code == 0, dry_err
    assert rollout_lines(out) == rollout_lines(dry_out)


def test_a_canary_group_whose_hosts_are_all_pinned_elsewhere_is_refused_as_by_rollout(fleet_wide, offline, plan):
    inventory = fleet_wide / "inventory.py"
    own = '{"ssh_hostname": f"{h}.example.invalid"}'
    pin = '{"vllm_image_tag": "old", "vllm_image_digest": "sha256:" + "9" * 64}'
    inventory.write_text(inventory.read_text().replace(own, own[:-1] + f", **({pin} if h in _CANARY else {{}})}}"))
    inventory.write_text(inventory.read_text().replace("all = (", '_CANARY = ("ra-01", "ra-07")\nall = (', 1))
    code, out, err = plan(fleet_wide, "--image", IMAGE, "--canary-group", "canary")
    assert code == 2 and out == ""
    assert "--canary-group canary: none of its hosts (ra-01, ra-07) is in this rollout (each is left out above)" in err
    assert err.endswith("rocmfleet plan: nothing planned (exit 2)\n") and offline == []
