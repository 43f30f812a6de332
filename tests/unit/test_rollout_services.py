"""Rollouts planned from services, on the 24-host test site (tests/fixtures/sites/rack24: three
racks, two services interleaved in inventory order, a ``canary`` group), through ``rocmfleet
rollout --dry`` with every socket connect and name lookup refused: the registry and the hosts cannot
be reached, the plan is printed anyway (exit 0) saying what it could not confirm."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from rocmfleet import entry
from rocmfleet.fleet.rollout import state as rstate

SITE = Path(__file__).parents[1] / "fixtures" / "sites" / "rack24"
IMAGE = "registry.example.invalid/vllm:0.34.0"
QWEN, SCOUT = "qwen3-235b-a22b", "llama-4-scout"
PIN = ("vllm_image_repository", "vllm_image_tag", "vllm_image_digest")


@pytest.fixture
def offline(monkeypatch) -> list[str]:
    """Every socket connect and name lookup refused and recorded (as tests/unit/test_cli_offline.py's
    ``no_network``; pyinfra's CLI swaps in gevent's socket on import, so it is imported first)."""
    import socket

    import pyinfra_cli  # noqa: F401

    tried: list[str] = []

    def refuse(what: str):
        def call(*args, **_kwargs):
            tried.append(what)
            raise OSError(f"test: no network ({what})")

        return call

    for owner, name in ((socket.socket, "connect"), (socket.socket, "connect_ex"), (socket, "create_connection"),
                        (socket, "getaddrinfo")):  # fmt: skip
        monkeypatch.setattr(owner, name, refuse(name))
    return tried


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A copy of the site (its group files may be edited by a command); the results root in tmp."""
    copy = tmp_path / "rack24"
    shutil.copytree(SITE, copy)
    monkeypatch.setenv(rstate.RESULTS_ENV, str(tmp_path / "results"))
    monkeypatch.delenv(rstate.OWN_DEPLOY_ENV, raising=False)
    return copy


@pytest.fixture
def fleet_wide(site):
    """The site with one image pinned for the whole fleet (in all.yml), none per rack."""
    for rack in "abc":
        path = site / "group_vars" / f"rack_{rack}.yml"
        path.write_text("".join(line for line in path.read_text().splitlines(True) if not line.startswith(PIN)))
    pinned = (SITE / "group_vars" / "rack_a.yml").read_text().split("\n", 1)[1]
    (site / "group_vars" / "all.yml").write_text("ssh_user: root\n" + pinned)
    return site


@pytest.fixture
def dry(capsys):
    """``rocmfleet rollout SITE --dry OPTIONS`` -> (exit status, stdout, stderr)."""

    def run(site: Path, *options: str) -> tuple[int, str, str]:
        code = entry.main(["rollout", str(site / "inventory.py"), "--dry", *options])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def batches(out: str) -> list[tuple[bool, list[tuple[str, str]]]]:
    """The ``plan:`` line as ``[(canary?, [(host, service)])]``."""
    line = next(line for line in out.splitlines() if line.startswith("plan: "))
    found = []
    for part in line.removeprefix("plan: ").split("; "):
        head, hosts = part.split(": ", 1)
        found.append(("(canary)" in head, [(h, s) for h, s in re.findall(r"(\S+) \[([^\]]+)\]", hosts)]))
    return found


SCOUTS = ("ra-07", "ra-08", "rb-01", "rb-02", "rb-03", "rb-04", "rc-07", "rc-08")
SERVICE_OF = {f"r{r}-{i:02d}": QWEN for r in "abc" for i in range(1, 9)} | dict.fromkeys(SCOUTS, SCOUT)


def test_batches_cut_in_inventory_order_would_take_six_of_one_service_at_once():
    # the old rule: 25% of 24 hosts, 6 a batch, in inventory order
    hosts = list(SERVICE_OF)
    chunks = [Counter(SERVICE_OF[h] for h in hosts[i : i + 6]) for i in range(0, 24, 6)]
    assert chunks[0][QWEN] == 6 and chunks[1][SCOUT] == 6  # over 25% of 16 (4) and of 8 (2)


@pytest.mark.parametrize(
    ("option", "bounds"),
    [
        ("1", {QWEN: 1, SCOUT: 1}),
        ("3", {QWEN: 3, SCOUT: 3}),
        ("25%", {QWEN: 4, SCOUT: 2}),
        ("50%", {QWEN: 8, SCOUT: 4}),
    ],
)
def test_no_batch_holds_more_than_max_unavailable_replicas_of_a_service(fleet_wide, offline, option, bounds, dry):
    code, out, err = dry(fleet_wide, "--image", IMAGE, "--max-unavailable", option)
    assert code == 0, err
    planned = batches(out)
    assert sorted(h for _c, b in planned for h, _s in b) == sorted(SERVICE_OF)  # every host once
    for _canary, batch in planned:
        counts = Counter(service for _h, service in batch)
        assert all(counts[s] <= bounds[s] for s in counts), (option, batch)
        assert all(SERVICE_OF[h] == s for h, s in batch)
    # greedy: the batches are as large as the bound allows (16 and 8 replicas)
    assert len(planned) == 1 + max(-(-15 // bounds[QWEN]), -(-7 // bounds[SCOUT])), planned
    # the default canary: one replica of each service, first
    assert planned[0][0] and Counter(s for _h, s in planned[0][1]) == {QWEN: 1, SCOUT: 1}
    assert not any(c for c, _b in planned[1:])
    said = f"{QWEN}: 16 replica(s), at most {bounds[QWEN]} out of service at once; {SCOUT}: 8 replica(s), at most"
    assert said in out
    assert f"--dry: digest of {IMAGE} not confirmed: registry unreachable (" in out
    assert "--dry: what it runs not confirmed: ra-01: " in out
    assert out.rstrip().endswith("nothing was changed")
    assert (fleet_wide / "group_vars" / "all.yml").read_text().count("0.33.0-r1") == 1  # unchanged


def test_canary_n_is_n_replicas_of_each_service(fleet_wide, offline, dry):
    code, out, err = dry(fleet_wide, "--image", IMAGE, "--canary", "2", "--max-unavailable", "1")
    assert code == 0, err
    planned = batches(out)
    canary = [b for c, b in planned if c]
    assert len(canary) == 2 and all(Counter(s for _h, s in b) == {QWEN: 1, SCOUT: 1} for b in canary)
    # the headline names each canary host's replicas and why those hosts
    hosts = f"ra-01 (1 replica of {QWEN}), ra-02 (1 replica of {QWEN}), ra-07 (1 replica of {SCOUT}), ra-08"
    assert f"canary (batches 1-2): {hosts}" in out
    assert "why: --canary 2: the fewest hosts, in inventory order, holding 2 replica(s) of each service" in out


def test_a_dry_run_leaves_no_lock_and_no_results_directory(fleet_wide, offline, dry, tmp_path):
    code, _out, err = dry(fleet_wide, "--image", IMAGE)
    assert code == 0, err
    assert not (tmp_path / "results").exists()  # no state directory, no .lock in it


def test_the_canary_group_is_the_canary(fleet_wide, offline, dry):
    code, out, err = dry(fleet_wide, "--image", IMAGE, "--canary-group", "canary", "--max-unavailable", "25%")
    assert code == 0, err
    planned = batches(out)
    assert planned[0] == (True, [("ra-01", QWEN), ("ra-07", SCOUT)])
    said = f"canary (batch 1): ra-01 (1 replica of {QWEN}), ra-07 (1 replica of {SCOUT}); why: the hosts of group"
    assert said in out


def test_an_unknown_canary_group_is_refused_with_the_known_groups(fleet_wide, offline, dry):
    code, out, err = dry(fleet_wide, "--image", IMAGE, "--canary-group", "canaries")
    assert code == 2 and "Traceback" not in err
    assert "--canary-group canaries: no host of" in err
    assert "its groups: canary, inventory, qwen, rack_a, rack_b, rack_c, scout" in err
    assert offline == []  # refused before any connection


def test_canary_and_canary_group_together_are_refused(fleet_wide, offline, dry):
    code, _out, err = dry(fleet_wide, "--canary", "1", "--canary-group", "canary")
    assert code == 2 and "give one of them" in err and offline == []


def test_a_per_rack_pin_rolls_one_group_bounded_over_the_whole_fleet(site, offline, dry):
    before = {p.name: p.read_text() for p in (site / "group_vars").iterdir()}
    code, out, err = dry(site, "--image", IMAGE, "--group", "rack_b", "--max-unavailable", "25%")
    assert code == 0, err
    planned = batches(out)
    assert sorted(h for _c, b in planned for h, _s in b) == [f"rb-{i:02d}" for i in range(1, 9)]
    for _canary, batch in planned:  # the bound is of the whole fleet's replicas: 4 of 16, 2 of 8
        counts = Counter(s for _h, s in batch)
        assert counts[QWEN] <= 4 and counts[SCOUT] <= 2
    assert f"+++ {site / 'group_vars' / 'rack_b.yml'}" in out and '+vllm_image_tag: "0.34.0"' in out
    assert "rack_a.yml" not in out
    assert {p.name: p.read_text() for p in (site / "group_vars").iterdir()} == before  # --dry changed nothing
    assert not list((site.parent / "results").rglob("rollout-state.json"))


def test_per_group_pins_without_group_are_refused_naming_each_group_and_image(site, offline, dry):
    code, out, err = dry(site, "--image", IMAGE)
    assert code == 2 and "Traceback" not in err
    assert "the image is pinned per group" in err and "--group NAME" in err
    for rack, d in zip("abc", "123", strict=True):
        assert f"rack_{rack} (" in err and f"0.33.0-r{d}@sha256:{d * 64}" in err
    assert offline == []  # refused before the registry or a host is asked


def test_a_group_file_that_leaves_the_repository_out_is_named_with_the_repository_its_hosts_get(site, offline, dry):
    for rack in "abc":  # the racks pin tag and digest only; the repository is each profile's
        path = site / "group_vars" / f"rack_{rack}.yml"
        path.write_text("".join(line for line in path.read_text().splitlines(True) if not line.startswith(PIN[0])))
    code, _out, err = dry(site, "--image", IMAGE)
    assert code == 2 and "?" not in err
    said = "tag 0.33.0-r2, digest sha256:" + "2" * 64 + " (no vllm_image_repository here: its hosts get "
    assert said in err and "from their profile or another file)" in err


def test_a_group_that_pins_no_image_is_refused(site, offline, dry):
    code, _out, err = dry(site, "--image", IMAGE, "--group", "qwen")
    assert code == 2 and "--group qwen: no group file of it sets vllm_image_*" in err
    code, _out, err = dry(site, "--image", IMAGE, "--group", "rack_z")
    assert code == 2 and "--group rack_z: no host of" in err and "rack_a" in err
    assert offline == []


def test_a_canary_group_outside_the_rolled_group_is_refused(site, offline, dry):
    code, _out, err = dry(site, "--image", IMAGE, "--group", "rack_b", "--canary-group", "canary")
    assert code == 2 and "--canary-group canary: none of its hosts (ra-01, ra-07) is in this rollout" in err
    assert offline == []


# --- the rollout itself on stand-in hosts: the plan recorded, one rack's pin edited (or put back) ---


@pytest.fixture
def stand_ins(site, monkeypatch):
    """The site's hosts, registry and preflight replaced (tests/unit/test_rollout_runner.py's CliSteps:
    every host runs its pinned image until switched); the inventory and group files are real."""
    from rocmfleet.fleet.check import compliance
    from rocmfleet.fleet.rollout import hoststeps, targetimage
    from tests.unit.test_rollout_runner import CliSteps

    new = rstate.ImageRef(repository="registry.example.invalid/vllm", tag="0.34.0", digest="sha256:" + "b" * 64)
    steps = CliSteps()
    monkeypatch.setattr(targetimage, "resolve", lambda reference, targets: new)
    monkeypatch.setattr(hoststeps, "HostSteps", lambda *args, **kwargs: steps)
    monkeypatch.setattr(compliance, "run_fleet", lambda targets, select, timeout_s, planning: [])
    return steps, new


def test_a_rack_rolls_with_its_plan_recorded_and_its_pin_edited(site, stand_ins, capsys):
    steps, new = stand_ins
    inventory = str(site / "inventory.py")
    rack_a = (site / "group_vars" / "rack_a.yml").read_text()
    code = entry.main(["rollout", inventory, "-y", "--image", IMAGE, "--group", "rack_b", "--max-unavailable", "25%"])
    out, err = capsys.readouterr()
    assert code == 0, err
    state = rstate.load_state(rstate.state_path(rstate.results_root(None, inventory), inventory))
    assert state.status == "done" and sorted(state.hosts) == [f"rb-{i:02d}" for i in range(1, 9)]
    assert {s: (b.replicas, b.max_unavailable) for s, b in state.services.items()} == {QWEN: (16, 4), SCOUT: (8, 2)}
    assert state.canary_batches == 1 and state.batches[0] == ["rb-01", "rb-05"]  # one scout, one qwen
    assert all(state.hosts[h].replicas == {SERVICE_OF[h]: 1} for h in state.hosts)
    assert new.digest in (site / "group_vars" / "rack_b.yml").read_text()
    assert (site / "group_vars" / "rack_a.yml").read_text() == rack_a
    assert set(steps.running) == set(state.hosts)  # no host outside rack_b was touched
    assert f"rollout {state.id}: 8 host(s) in {len(state.batches)} batch(es), at most 4 of {QWEN}, 2 of {SCOUT}" in out


def test_a_failed_canary_puts_the_racks_pin_back(site, stand_ins, capsys):
    steps, _new = stand_ins
    inventory = str(site / "inventory.py")
    rack_b = (site / "group_vars" / "rack_b.yml").read_text()
    steps.fail = {("gate", "rb-05")}
    code = entry.main(["rollout", inventory, "-y", "--image", IMAGE, "--group", "rack_b", "--canary-group", "rack_b"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    state = rstate.load_state(rstate.state_path(rstate.results_root(None, inventory), inventory))
    # the whole rack as the canary, split by the default bound of 1 replica of each service
    assert state.canary_batches == len(state.batches) == 4 and state.status == "rolled_back"
    assert (site / "group_vars" / "rack_b.yml").read_text() == rack_b


def test_a_host_whose_image_another_group_pins_is_left_out_of_a_groups_rollout(site, offline, dry):
    # ra-01 in rack_a and rack_b: rack_b's pin wins, so an edit of rack_a.yml leaves it as it is;
    # rolling it with rack_a left it on an image its data did not say (the next deploy put it back)
    inventory = site / "inventory.py"
    text = inventory.read_text()
    text = text.replace(
        'rack_b = ([h for h in _HOSTS if h.startswith("rb-")]',
        'rack_b = (["ra-01"] + [h for h in _HOSTS if h.startswith("rb-")]',
    )
    inventory.write_text(text)
    code, out, err = dry(site, "--image", IMAGE, "--group", "rack_a")
    assert code == 0, err
    assert sorted(h for _c, b in batches(out) for h, _s in b) == [f"ra-{i:02d}" for i in range(2, 9)]
    said = "ra-01: in rack_a, but its image is pinned elsewhere (a later group or its own data: "
    assert f"{said}registry.example.invalid/vllm:0.33.0-r2@sha256:{'2' * 64}): left out" in out
    code, out, err = dry(site, "--image", IMAGE, "--group", "rack_b")
    assert code == 0, err
    assert "ra-01" in {h for _c, b in batches(out) for h, _s in b} and "left out" not in out


def test_a_host_without_instances_says_so_in_its_batch(site, offline, dry):
    inventory = site / "inventory.py"
    own = '{"ssh_hostname": f"{h}.example.invalid"}'
    inventory.write_text(
        inventory.read_text().replace(own, own[:-1] + ', **({"vllm_instances": []} if h == "ra-03" else {})}')
    )
    code, out, err = dry(site, "--image", IMAGE, "--group", "rack_a")
    assert code == 0, err
    assert "ra-03 [no instance]" in out and "[]" not in out


def test_dry_says_how_many_hosts_the_preflight_could_not_check(site, offline, dry):
    # "preflight: ... on 0 host(s)" read as if the fleet had been checked and found empty
    code, out, err = dry(site, "--image", IMAGE, "--group", "rack_c")
    assert code == 0, err
    assert "preflight: rocmfleet check --select gpu,vllm on 0 host(s) (8 not reached: not checked)\n" in out


def test_a_host_pinned_by_its_own_data_is_left_out_of_a_fleet_wide_rollout(fleet_wide, offline, dry):
    inventory = fleet_wide / "inventory.py"
    own = '{"ssh_hostname": f"{h}.example.invalid"}'
    pin = '{"vllm_image_tag": "old", "vllm_image_digest": "sha256:" + "9" * 64}'
    inventory.write_text(inventory.read_text().replace(own, own[:-1] + f", **({pin} if h == 'ra-02' else {{}})}}"))
    code, out, err = dry(fleet_wide, "--image", IMAGE)
    assert code == 0, err
    rolled = {h for _c, b in batches(out) for h, _s in b}
    assert "ra-02" not in rolled and len(rolled) == 23
    said = "ra-02: its image is pinned elsewhere (a later group or its own data: registry.example.invalid/vllm:old@"
    assert said in out and f"left out, an edit of {fleet_wide / 'group_vars' / 'all.yml'} does not change it" in out


def test_a_canary_group_whose_hosts_are_all_pinned_elsewhere_is_refused(fleet_wide, offline, dry):
    inventory = fleet_wide / "inventory.py"
    own = '{"ssh_hostname": f"{h}.example.invalid"}'
    pin = '{"vllm_image_tag": "old", "vllm_image_digest": "sha256:" + "9" * 64}'
    inventory.write_text(inventory.read_text().replace(own, own[:-1] + f", **({pin} if h in _CANARY else {{}})}}"))
    inventory.write_text(inventory.read_text().replace("all = (", '_CANARY = ("ra-01", "ra-07")\nall = (', 1))
    code, _out, err = dry(fleet_wide, "--image", IMAGE, "--canary-group", "canary")
    assert code == 2
    assert "--canary-group canary: none of its hosts (ra-01, ra-07) is in this rollout (each is left out above)" in err


def test_a_dry_run_without_image_names_the_image_and_the_file_pinning_it(site, offline, dry):
    code, out, err = dry(site, "--limit", "rack_b")
    assert code == 0, err
    ref = "registry.example.invalid/vllm:0.33.0-r2@sha256:" + "2" * 64
    assert f"image: {ref} on 8 host(s), pinned by " in out
    assert "group_vars/rack_b.yml (rack_b) (no --image: the image the group data pins)" in out
    assert "warning" not in err


def test_per_group_pins_without_image_are_refused_naming_each_image_and_its_file(site, offline, dry):
    code, _out, err = dry(site)
    assert code == 2
    assert err.count(" on 8 host(s), pinned by ") == 3
    for rack in "abc":
        assert f"group_vars/rack_{rack}.yml (rack_{rack})" in err


def test_a_dry_run_of_a_placeholder_digest_warns(fleet_wide, offline, dry):
    from rocmfleet.config.validate import PLACEHOLDER_DIGEST

    path = fleet_wide / "group_vars" / "all.yml"
    path.write_text(path.read_text().replace("sha256:" + "1" * 64, PLACEHOLDER_DIGEST))
    code, out, err = dry(fleet_wide)
    assert code == 0, err
    assert f"image: registry.example.invalid/vllm:0.33.0-r1@{PLACEHOLDER_DIGEST} on 24 host(s)" in out
    assert "rocmfleet: warning: " in err and "the image digest is the placeholder" in err


def test_dry_json_prints_the_plan_as_plan_image_json_does(fleet_wide, offline, capsys):
    import json

    inventory = str(fleet_wide / "inventory.py")
    options = ["--image", IMAGE + "@sha256:" + "4" * 64, "--max-unavailable", "25%", "--canary-group", "canary"]
    code = entry.main(["rollout", inventory, "--dry", "--json", *options])
    out, err = capsys.readouterr()
    assert code == 0, err
    rollout = json.loads(out)["rollout"]
    assert rollout["canary_hosts"] == ["ra-01", "ra-07"] and rollout["canary_batches"] == 1
    assert {s["service"]: s["max_unavailable"] for s in rollout["services"]} == {QWEN: 4, SCOUT: 2}
    assert rollout["digest"] == "sha256:" + "4" * 64
    assert rollout["batches"][0] == ["ra-01", "ra-07"] and sum(map(len, rollout["batches"])) == 24
    # what the dry run could not confirm (no host answers here) is in the record too, not on stderr only
    assert any(line.startswith("--dry: what it runs not confirmed: ") for line in rollout["lines"]), rollout["lines"]
    assert entry.main(["plan", inventory, "--json", *options]) == 0
    planned = json.loads(capsys.readouterr().out)["rollout"]
    assert set(planned) == set(rollout)
    for key in ("image", "digest", "hosts", "canary", "canary_hosts", "services", "batches", "canary_batches"):
        assert planned[key] == rollout[key], key
