"""Fleet rollouts: planning, state file, group data rewrite, gate decision.

(rocmfleet.fleet.rollout.{batches,state,gate,report}, rocmfleet.config.groupdata_edit)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocmfleet.config.groupdata_edit import EditError, holders, parse, set_keys, unified_diff, unset_keys
from rocmfleet.fleet.bench.bench import Thresholds
from rocmfleet.fleet.rollout import batches as rbatches
from rocmfleet.fleet.rollout import gate as rgate
from rocmfleet.fleet.rollout import report as rreport
from rocmfleet.fleet.rollout import rolloutplan
from rocmfleet.fleet.rollout import state as rstate
from tests.unit.test_bench import raw, result_from  # noqa: F401 - the fixture is used by name

OLD = rstate.ImageRef(repository="reg:5000/vllm", tag="0.32.0-lab.1", digest="sha256:" + "a" * 64)
NEW = rstate.ImageRef(repository="reg:5000/vllm", tag="0.32.0-lab.2", digest="sha256:" + "b" * 64)


# --- max-unavailable and batches --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "hosts", "expected"),
    [("1", 10, 1), ("3", 2, 3), ("25%", 10, 2), ("25%", 3, 1), ("100%", 7, 7), ("50%", 5, 2), ("10.5%", 100, 10)],
)
def test_max_unavailable_count_or_percentage_rounded_down_at_least_one(text, hosts, expected):
    assert rbatches.parse_max_unavailable(text, hosts) == expected


@pytest.mark.parametrize("text", ["0", "-1", "0%", "101%", "x", "%", "1.5", ""])
def test_bad_max_unavailable_is_refused_naming_the_option(text):
    with pytest.raises(rbatches.PlanError, match="--max-unavailable"):
        rbatches.parse_max_unavailable(text, 10)


BATCH_CASES = json.loads((Path(__file__).parents[1] / "fixtures" / "rollout" / "batches.json").read_text())


@pytest.mark.parametrize("case", [k for k in BATCH_CASES if not k.startswith("_")])
def test_batches_from_services_as_the_cases_say(case):
    given = BATCH_CASES[case]
    planned = rolloutplan.plan(
        list(given["hosts"]),
        given["hosts"],
        given["max_unavailable"],
        given.get("canary", 1),
        given.get("canary_hosts"),
    )
    assert planned.batches == given["batches"]
    assert planned.canary_batches == given["canary_batches"]


def test_a_negative_canary_is_refused():
    with pytest.raises(rbatches.PlanError, match="--canary"):
        rbatches.default_canary({"h": {"a": 1}}, -1)


_services = st.sampled_from(["a", "b", "c"])
_fleets = st.lists(st.dictionaries(_services, st.integers(1, 3), min_size=0, max_size=3), min_size=0, max_size=30)


@given(fleet=_fleets, canary=st.integers(0, 3), text=st.sampled_from(["1", "2", "3", "10%", "25%", "50%", "100%"]))
def test_every_host_once_and_no_batch_over_any_services_bound(fleet, canary, text):
    hosts = {f"h{i}": r for i, r in enumerate(fleet)}
    bounds = rbatches.service_bounds(text, hosts)
    head = rbatches.default_canary(hosts, canary)
    batches = rbatches.plan_batches(hosts, bounds, head)
    assert sorted(h for b in batches for h in b) == sorted(hosts)
    assert all(b for b in batches)
    for batch in batches:  # a batch of more than one host holds at most the bound of each service
        assert rbatches.over_bound(batch, hosts, bounds) == {}
        if len(batch) > 1:
            assert all(n <= bounds[s] for s, n in rbatches.totals({h: hosts[h] for h in batch}).items())
    counts = rbatches.totals(hosts)
    got = rbatches.totals({h: hosts[h] for h in head})
    assert all(got.get(s, 0) >= min(canary, n) for s, n in counts.items())  # the canary holds N of each
    if canary == 0:
        assert head == []
    canaries = len(rbatches.pack(head, hosts, bounds))
    assert sorted(h for b in batches[:canaries] for h in b) == sorted(head)  # the canary first
    for i, batch in enumerate(batches[:-1]):  # greedy: no later host would have fitted an earlier batch
        later = [h for b in batches[i + 1 :] for h in b if (i < canaries) == (h in head)]
        load = rbatches.totals({h: hosts[h] for h in batch})
        if rbatches.fits({}, load, bounds):  # not one host over a bound alone
            assert not any(rbatches.fits(load, hosts[h], bounds) for h in later)


def test_image_ref_parses_what_the_units_run():
    assert rstate.ImageRef.parse(OLD.reference) == OLD
    assert rstate.ImageRef.parse("reg:5000/vllm@sha256:" + "a" * 64) is None  # no tag
    assert rstate.ImageRef.parse("reg:5000/vllm:1.0") is None  # no digest
    assert OLD.data() == {
        "vllm_image_repository": "reg:5000/vllm",
        "vllm_image_tag": "0.32.0-lab.1",
        "vllm_image_digest": OLD.digest,
    }


# --- state file -------------------------------------------------------------------------------


def _state(**changes) -> rstate.RolloutState:
    batches = [["a"], ["b", "c"], ["d"]]
    hosts = {h: rstate.HostState(batch=i, before=OLD, after=NEW) for i, b in enumerate(batches) for h in b}
    fields = {"target": NEW, "max_unavailable": 2, **changes}
    return rstate.RolloutState(id="20260101T000000Z", inventory="inventories/prod.py", batches=batches, hosts=hosts,
                           **fields)  # fmt: skip


def test_state_round_trips_and_writes_atomically(tmp_path):
    path = rstate.state_path(tmp_path, "inventories/prod.py")
    assert path == tmp_path / "prod" / "rollout-state.json"
    state = _state()
    state.hosts["a"].step = "done"
    state.hosts["b"].step = "switching"
    rstate.save_state(state, path)
    assert not path.with_name(path.name + ".tmp").exists()
    loaded = rstate.load_state(path)
    assert loaded == state
    assert loaded.touched() == ["a", "b"]
    assert loaded.remaining_batches() == [1, 2]
    assert rstate.load_state(tmp_path / "none.json") is None
    path.write_text("{}")
    with pytest.raises(ValueError, match="not a usable rollout state file"):
        rstate.load_state(path)


def test_touched_means_may_have_changed():
    state = _state()
    for host, step in zip("abcd", ["rolled_back", "drained", "rollback_failed", "gated"], strict=True):
        state.hosts[host].step = step
    assert state.touched() == ["c", "d"]
    assert state.drained() == ["b", "d"]


def test_a_recorded_rollout_refuses_plain_deploys_but_not_its_own(tmp_path, monkeypatch):
    monkeypatch.delenv(rstate.OWN_DEPLOY_ENV, raising=False)
    inventory = "inventories/prod.py"
    assert rstate.deploy_refusal(inventory, tmp_path) is None
    state = _state()
    rstate.save_state(state, rstate.state_path(tmp_path, inventory))
    why = rstate.deploy_refusal(inventory, tmp_path)
    assert why is not None
    assert "rollout 20260101T000000Z of inventories/prod.py" in why
    assert NEW.reference in why and "--resume" in why and "--rollback" in why
    assert rstate.deploy_refusal("inventories/other.py", tmp_path) is None
    monkeypatch.setenv(rstate.OWN_DEPLOY_ENV, state.id)
    assert rstate.deploy_refusal(inventory, tmp_path) is None
    monkeypatch.setenv(rstate.OWN_DEPLOY_ENV, "another")
    assert rstate.deploy_refusal(inventory, tmp_path) is not None
    for status in ("done", "rolled_back"):
        rstate.save_state(_state(status=status), rstate.state_path(tmp_path, inventory))
        assert rstate.deploy_refusal(inventory, tmp_path) is None


def test_check_on_load_stops_a_deploy_during_a_rollout(tmp_path, monkeypatch, capsys):
    from rocmfleet.config import validate

    monkeypatch.delenv(rstate.OWN_DEPLOY_ENV, raising=False)
    monkeypatch.setenv(rstate.RESULTS_ENV, str(tmp_path))
    rstate.save_state(_state(), rstate.state_path(tmp_path, "inventories/prod.py"))
    with pytest.raises(SystemExit) as exited:
        validate.check_on_load(str(Path(__file__).resolve().parents[2] / "inventories" / "prod.py"))
    assert exited.value.code == validate.EXIT_INVALID
    err = capsys.readouterr().err
    assert err.startswith("rocmfleet: rollout 20260101T000000Z") and "Traceback" not in err


# --- group data rewrite -----------------------------------------------------------------------

GROUP = """\
# Example fleet (a comment that must stay)
vllm_profile: llama-3.3-70b   # the model
vllm_image_tag: "0.10.1"  # pinned by the last rollout
vllm_image_digest: sha256:{old}
vllm_env: {{}}
vllm_secret_env:
  HF_TOKEN: !vault |
    $ANSIBLE_VAULT;1.1;AES256
    3132
""".format(old="a" * 64)


def test_set_keys_keeps_comments_places_and_other_keys():
    new = set_keys(GROUP, {"vllm_image_tag": "1.0", "vllm_image_digest": NEW.digest}, "prod.yml")
    assert new.splitlines()[0] == "# Example fleet (a comment that must stay)"
    assert 'vllm_image_tag: "1.0"  # pinned by the last rollout' in new
    assert f'vllm_image_digest: "{NEW.digest}"' in new
    assert parse(new)["vllm_image_tag"] == "1.0"  # a string, not the float 1.0
    assert parse(new)["vllm_secret_env"] == parse(GROUP)["vllm_secret_env"]
    diff = unified_diff(GROUP, new, "group_vars/prod.yml")
    assert diff.startswith("--- group_vars/prod.yml\n+++ group_vars/prod.yml")
    assert sum(line.startswith("-vllm") for line in diff.splitlines()) == 2
    assert unified_diff(GROUP, GROUP, "x") == ""


def test_missing_keys_are_appended_and_removed_again():
    text = "vllm_profile: lab   # keep\n"
    added = set_keys(text, {"vllm_image_repository": "reg/x", "vllm_image_tag": "t1"})
    assert added == 'vllm_profile: lab   # keep\nvllm_image_repository: "reg/x"\nvllm_image_tag: "t1"\n'
    assert unset_keys(added, ["vllm_image_repository", "vllm_image_tag"]) == text
    assert set_keys("a: 1", {"b": "2"}) == 'a: 1\nb: "2"\n'


@pytest.mark.parametrize(
    "text",
    [
        "vllm_image_tag: >\n  folded\n",
        "vllm_image_tag: x\nvllm_image_tag: y\n",
        "{vllm_image_tag: x, a: 1}\n",
    ],
)
def test_values_that_cannot_be_rewritten_in_place_are_refused(text):
    with pytest.raises((EditError, ValueError)):
        set_keys(text, {"vllm_image_tag": "new"}, "g.yml")


def test_a_nested_key_of_the_same_name_is_not_the_top_level_one():
    new = set_keys("outer:\n  vllm_image_tag: nested\n", {"vllm_image_tag": "t"})
    assert parse(new) == {"outer": {"vllm_image_tag": "nested"}, "vllm_image_tag": "t"}


def test_holders_name_the_files_that_pin_an_image():
    files = {"all.yml": "base_packages: []\n", "prod.yml": GROUP, "lab.yml": "vllm_image_digest: sha256:x\n"}
    assert holders(files) == ["prod.yml", "lab.yml"]


# --- the gate ---------------------------------------------------------------------------------


def test_gate_readiness_then_check_then_benchmark(raw):  # noqa: F811
    base = {"2000x150-c4": result_from(raw, "before.json", failed=0)}
    same = {"2000x150-c4": result_from(raw, failed=0)}
    t = Thresholds(regression_tolerance=0.10, ttft_p99_ms=0.001)  # an absolute limit is not the gate's
    assert rgate.gate_decision(None, [], base, same, [], t).passed
    out = rgate.gate_decision("not ready after 900 s", ["vllm::ready[a]: failed"], base, same, [], t)
    assert (out.passed, out.gate, out.reasons) == (False, "readiness", ["not ready after 900 s"])
    out = rgate.gate_decision(None, ["vllm::container_image_digest[a]: failed: runs sha256:aa"], base, same, [], t)
    assert (out.gate, out.reasons) == ("check", ["vllm::container_image_digest[a]: failed: runs sha256:aa"])


def test_gate_benchmark_regression_failed_requests_and_missing_cases(raw):  # noqa: F811
    base = {"c": result_from(raw, "before.json", failed=0)}
    slow = {"c": result_from(raw, failed=0, output_throughput=124.58542994370372 * 0.5)}
    out = rgate.gate_decision(None, [], base, slow, [], Thresholds(regression_tolerance=0.10))
    assert (out.gate, out.regression_only) == ("benchmark", True)  # slower only: the rollout runs it again
    assert out.reasons[0].startswith("c: output_throughput: 62.29 tok/s is 50.0% below the baseline 124.59 tok/s")
    assert rgate.gate_decision(None, [], base, slow, [], Thresholds(regression_tolerance=0.6)).passed
    failing = {"c": result_from(raw, failed=3)}
    out = rgate.gate_decision(None, [], base, failing, [], Thresholds())
    assert (out.reasons, out.regression_only) == (["c: failed: 3 requests > limit 0"], False)
    slow_and_failing = {"c": result_from(raw, failed=3, output_throughput=1.0)}
    out = rgate.gate_decision(None, [], base, slow_and_failing, [], Thresholds())
    assert out.regression_only is False and out.reasons[0] == "c: failed: 3 requests > limit 0"
    assert "below the baseline" in out.reasons[1]
    out = rgate.gate_decision(None, [], base, {}, ["c: timed out after 60 s"], Thresholds())
    assert out.reasons == ["c: timed out after 60 s"]
    out = rgate.gate_decision(None, [], base, {}, [], Thresholds())
    assert out.reasons == ["c: no result after the switch"]
    # no result before the switch: judged on failed requests only
    assert rgate.gate_decision(None, [], {}, slow, [], Thresholds()).passed


def test_report_has_a_row_per_host_with_times_and_deltas(raw):  # noqa: F811
    state = _state(status="done")
    state.hosts["a"].times = {"pull": 12.0, "restart": 3.5, "readiness": 40.25, "gate": 30.0}
    state.hosts["a"].step = "done"
    state.hosts["a"].bench = rgate.bench_numbers(
        {"c": result_from(raw, failed=0)}, {"c": result_from(raw, failed=0, output_throughput=124.58542994370372 * 1.1)}
    )
    state.hosts["b"].error = "benchmark gate failed: c: failed: 3 requests > limit 0"
    report = rreport.markdown_report(state)
    assert "| host | batch | before | after | step | pull s | drain s | restart s | readiness s | gate s |" in report
    row = next(line for line in report.splitlines() if line.startswith("| a |"))
    assert "| canary | 0.32.0-lab.1@aaaaaaaaaaaa | 0.32.0-lab.2@bbbbbbbbbbbb | done | 12.0 | - | 3.5 | 40.2 |" in row
    assert "output_throughput 137.04 (+10.0%)" in row
    assert "- **b**: benchmark gate failed" in report


def test_status_json_names_the_rollout_steps():
    state = _state()
    data = json.loads(rreport.status_json([{"host": "a", "instance": "x"}], state))
    assert data["rollout"]["target"] == NEW.reference
    assert data["rollout"]["steps"] == {"a": "pending", "b": "pending", "c": "pending", "d": "pending"}
    assert json.loads(rreport.status_json([], None)) == {"rollout": None, "instances": []}


def test_eta_from_the_mean_batch_time():
    assert rbatches.eta_s(0, 4, 10.0) is None
    assert rbatches.eta_s(1, 4, 100.0) == 300.0


def test_an_unreadable_state_path_is_a_clear_error_not_a_traceback(tmp_path):
    (tmp_path / "rollout-state.json").mkdir()
    with pytest.raises(ValueError, match="cannot read the rollout state"):
        rstate.load_state(tmp_path / "rollout-state.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"id": 1}')
    with pytest.raises(ValueError, match=r"not a usable rollout state file \(\d+ problem\(s\)\)"):
        rstate.load_state(bad)


def _edited(tmp_path, edit) -> list[str]:
    """The problems load_state lists for the state file of :func:`_state` after ``edit(data)``."""
    data = json.loads(_state().model_dump_json())
    edit(data)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError) as refused:
        rstate.load_state(path)
    head, *lines = str(refused.value).splitlines()
    assert head.startswith(f"{path}: not a usable rollout state file ({len(lines)} problem(s))")
    return [line.removeprefix("  - ") for line in lines]


def test_a_state_whose_parts_contradict_each_other_is_refused_with_every_problem(tmp_path):
    def edit(data):
        data["batches"] = [["a"], ["b", "a"], ["d", "zz"]]  # a twice, zz has no entry, c in no batch
        data["hosts"]["b"].update(before=None, step="done")  # switched, but nothing to roll back to
        data["hosts"]["d"]["batch"] = 0  # batches[2] lists it

    assert _edited(tmp_path, edit) == [
        "batches[1][1]: 'a': already in batch 0; a host is in one batch",
        "batches[2][1]: 'zz': no entry in hosts; every batched host has one",
        "hosts.b.before: null: step 'done' means its deploy started, so the image it ran before "
        "(repository, tag, digest) is needed to roll it back",
        "hosts.c: in no batch; every host is in one batch",
        "hosts.d.batch: 0: batches[2] lists it; must be 2",
    ]


def test_unknown_steps_statuses_keys_and_oversized_batches_are_refused_together(tmp_path):
    def edit(data):
        data["status"] = "pausd"
        data["hosts"]["a"]["step"] = "swiched"
        data["hosts"]["a"]["stpe"] = "done"
        data["batches"] = [["a", "b", "c"], ["d"]]
        data["target"] = None

    problems = _edited(tmp_path, edit)
    assert problems[0].startswith("status: \"pausd\": Input should be 'running', 'paused', 'done'")
    assert problems[1].startswith("hosts.a.step: \"swiched\": Input should be 'pending'")
    assert problems[2] == 'hosts.a.stpe: "done": Extra inputs are not permitted'
    assert len(problems) == 3  # the consistency is judged once the types are right
    fixed = _edited(tmp_path, lambda d: edit(d) or d.update(status="running") or d["hosts"]["a"].update(step="done")
                    or d["hosts"]["a"].pop("stpe"))  # fmt: skip
    assert fixed == [
        "batches[0]: 3 hosts: at most max_unavailable (2) per batch",
        "hosts.b.batch: 1: batches[0] lists it; must be 0",
        "hosts.c.batch: 1: batches[0] lists it; must be 0",
        "hosts.d.batch: 2: batches[1] lists it; must be 1",
        "target: null: a rollout records the image it rolls out (repository, tag, digest)",
    ]


def test_a_host_given_twice_in_the_file_is_refused(tmp_path):
    path = tmp_path / "state.json"
    text = _state().model_dump_json(indent=2)
    entry = text[text.index('"a": {') : text.index('"b": {')]
    path.write_text(text.replace('"b": {', entry + '"b": {', 1))
    with pytest.raises(ValueError, match="'a': given more than once in one object"):
        rstate.load_state(path)


def test_state_lives_beside_the_inventory_whatever_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.delenv(rstate.RESULTS_ENV, raising=False)
    (tmp_path / "inventories").mkdir()
    (tmp_path / "elsewhere").mkdir()
    inventory = tmp_path / "inventories" / "prod.py"
    rstate.save_state(_state(), rstate.state_path(rstate.results_root(None, inventory), inventory))
    assert (tmp_path / "inventories" / "rollout-results" / "prod" / rstate.STATE_NAME).is_file()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert rstate.deploy_refusal(inventory) is not None  # a deploy started from another directory sees it
    monkeypatch.chdir(tmp_path)
    assert rstate.deploy_refusal("inventories/prod.py") is not None
    monkeypatch.setenv(rstate.RESULTS_ENV, str(tmp_path / "other"))
    assert rstate.deploy_refusal(inventory) is None  # the environment names another root


def test_a_restart_blocks_deploys_only_while_running_and_offers_no_rollback(tmp_path, monkeypatch):
    monkeypatch.delenv(rstate.OWN_DEPLOY_ENV, raising=False)
    inventory = "inventories/prod.py"
    restart = _state(kind="restart", target=None)
    rstate.save_state(restart, rstate.state_path(tmp_path, inventory))
    why = rstate.deploy_refusal(inventory, tmp_path)
    assert why is not None and "(rolling restart)" in why and "--resume" in why and "--rollback" not in why
    rstate.save_state(_state(kind="restart", target=None, status="failed"), rstate.state_path(tmp_path, inventory))
    assert rstate.deploy_refusal(inventory, tmp_path) is None  # it changed no image; a deploy may fix its host
    assert _state(status="failed").blocking  # a failed rollout's hosts may run two images: it blocks


def test_a_corrupt_state_file_stops_a_deploy_with_every_problem(tmp_path):
    path = rstate.state_path(tmp_path, "inventories/prod.py")
    rstate.save_state(_state(), path)
    path.write_text(path.read_text().replace('"step": "pending"', '"step": "swiched"'))
    why = rstate.deploy_refusal("inventories/prod.py", tmp_path)
    assert why.startswith(f"{path}: not a usable rollout state file (4 problem(s))")
    assert why.endswith("\nFix the file, or remove it, before deploying")


def test_one_rollout_process_per_inventory_and_each_writer_its_own_temp_file(tmp_path):
    import subprocess
    import sys

    from rocmfleet.fleet.check.hostplan import HostPlanning
    from rocmfleet.fleet.inventory import load_targets
    from rocmfleet.fleet.rollout import command
    from rocmfleet.plan.build import plan_host

    path = rstate.state_path(tmp_path, "inventories/prod.py")
    held = subprocess.Popen(  # another process holds the lock, as a running rollout does
        [sys.executable, "-c", "import sys, time; from pathlib import Path\n"
         "from rocmfleet.fleet.rollout import state as rstate\n"
         "with rstate.run_lock(Path(sys.argv[1])):\n print('held', flush=True); time.sleep(60)", str(path)],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    try:
        assert held.stdout.readline().strip() == "held"
        errors: list[str] = []
        fleet = command.Fleet(load_targets, HostPlanning(plan_host))  # not reached: the lock is refused first
        code = command.run_rollout(
            "inventories/prod.py", resume=True, results_dir=str(tmp_path), emit=print, error=errors.append, fleet=fleet
        )
        assert code == 2 and "another rollout or restart process holds" in errors[0], errors
        assert "nothing was done" in errors[0]
    finally:
        held.kill()
        held.wait()
    with rstate.run_lock(path):  # the kernel dropped the killed holder's lock
        rstate.save_state(_state(), path)
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []
    assert rstate.load_state(path).id == _state().id


def test_a_state_file_nested_too_deep_or_not_utf8_is_one_clear_error(tmp_path):
    path = rstate.state_path(tmp_path, "inventories/prod.py")
    path.parent.mkdir(parents=True)
    for content, words in ((b"[" * 100000, "nested too deeply"), (b"\xff\xfe{", "not UTF-8")):
        path.write_bytes(content)
        with pytest.raises(ValueError, match=words) as raised:
            rstate.load_state(path)
        assert str(path) in str(raised.value) and "nothing was done" in str(raised.value)


@pytest.mark.parametrize("run_id", ["", "../../etc", "/tmp/x", ".hidden", "a/b"])
def test_a_state_whose_id_is_a_path_is_refused(tmp_path, run_id):
    path = rstate.state_path(tmp_path, "inventories/prod.py")
    path.parent.mkdir(parents=True)
    data = json.loads(_state().model_dump_json())
    data["id"] = run_id
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="id"):
        rstate.load_state(path)


def test_a_state_with_services_refuses_a_batch_over_a_services_bound_and_an_old_file_still_reads():
    replicas = {"a": {"s": 1}, "b": {"s": 1}, "c": {"t": 1}, "d": {"s": 1}}
    services = {"s": rstate.ServiceBound(replicas=3, max_unavailable=1), "t": rstate.ServiceBound(replicas=1,
                max_unavailable=1)}  # fmt: skip
    hosts = {h: rstate.HostState(batch=i, before=OLD, after=NEW, replicas=replicas[h])
             for i, b in enumerate([["a"], ["b", "c"], ["d"]]) for h in b}  # fmt: skip
    good = rstate.RolloutState(id="r1", inventory="i.py", target=NEW, max_unavailable=2, batches=[["a"], ["b", "c"],
                               ["d"]], hosts=hosts, services=services, canary_batches=1)  # fmt: skip
    assert good.canary_batch_count() == 1
    text = good.model_dump_json()
    bad = json.loads(text)
    bad["batches"] = [["a", "b"], ["c"], ["d"]]
    bad["hosts"]["b"]["batch"], bad["hosts"]["c"]["batch"] = 0, 1
    state, problems = rstate.state_problems(json.dumps(bad))
    assert state is None and problems == ["batches[0]: 2 replicas of 's': at most its max_unavailable (1)"]
    old = json.loads(text)  # a file written before per-service plans: no services, replicas, canary_batches
    for key in ("services", "canary_group", "canary_batches"):
        old.pop(key)
    for host in old["hosts"].values():
        host.pop("replicas")
    state, problems = rstate.state_problems(json.dumps(old))
    assert problems == [] and state.canary_batch_count() == 1 and not state.services


def test_a_rollback_returns_hosts_in_groups_within_each_services_bound():
    hosts = {"a1": {"a": 1}, "a2": {"a": 1}, "b1": {"b": 1}, "a3": {"a": 1}}
    assert rbatches.rollback_groups(["a1", "a2", "b1", "a3"], hosts, {"a": 1, "b": 1}, 3) == [
        ["a1", "b1"],
        ["a2"],
        ["a3"],
    ]
    # a state file without services: runs of max_unavailable hosts, as before
    assert rbatches.rollback_groups(["a1", "a2", "b1", "a3"], hosts, {}, 3) == [["a1", "a2", "b1"], ["a3"]]
