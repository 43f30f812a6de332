"""The fleet plan (``rocmfleet plan``): given data and a topology -> the plan, from JSON fixtures
(``tests/fixtures/plans/fleet/<case>/``: ``given.json`` and ``expected.json``, the plan's JSON);
the command offline (every socket call refused), its bytes stable, secrets by name only.

``ROCMFLEET_WRITE_PLANS=1`` rewrites the expectations (review the diff: it is the change on hosts).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rocmfleet import entry
from rocmfleet.config.settings import host_config
from rocmfleet.config.vault import Secret
from rocmfleet.plan import render, sources
from rocmfleet.plan.build import plan_fleet, plan_host
from rocmfleet.plan.model import FleetPlan, host_from_dict, host_from_json, to_dict, to_json

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "tests" / "fixtures" / "plans" / "fleet"
CASES = sorted(p.name for p in FLEET.iterdir() if (p / "given.json").is_file())
PROD = "inventories/prod.py"


def planned(case: str) -> FleetPlan:
    given = json.loads((FLEET / case / "given.json").read_text())
    profiles = (FLEET / case / given["profiles"]).resolve() if "profiles" in given else None
    topology = given.get("topology")
    facts = sources.load(str(FLEET / case / topology) if topology and topology != "mi300x" else topology)
    # the fixture's own path is not part of the plan: the source says the file's name
    facts = sources.HostFacts(**{**facts.__dict__, "source": facts.source.replace(str(FLEET / case) + "/", "")})
    hosts = [
        (h["name"], host_config(h["data"], profiles) if profiles else host_config(h["data"]), h["groups"])
        for h in given["hosts"]
    ]
    return plan_fleet(hosts, facts)


@pytest.mark.parametrize("case", CASES)
def test_plan_from_given_data_and_topology_is_the_expected_one(case):
    found = to_json(planned(case))
    expected = FLEET / case / "expected.json"
    if os.environ.get("ROCMFLEET_WRITE_PLANS"):
        expected.write_text(found)
    assert found == expected.read_text()


def test_the_cases_cover_services_a_recorded_host_and_a_refused_placement():
    plan = planned("two-services")
    assert [(s.name, [r.id for r in s.replicas]) for s in plan.services] == [
        ("llama-3.3-70b", ["rack1-a/llama-a", "rack1-a/llama-b", "rack2-a/llama-a"]),
        ("qwen3-30b-a3b", ["rack2-b/qwen-a"]),
    ]
    assert all(len(r.ranks) == 1 and r.ranks[0].rank == 0 for s in plan.services for r in s.replicas)
    assert plan.hosts[0].groups == ("canary", "rack1")
    assert plan.hosts[0].topology_source == "default mi300x (8x MI300X, SPX, NPS1)"
    assert plan.hosts[0].assumed == ("device_gids", "os")
    lab = planned("lab-1-recorded").hosts[0]
    assert lab.topology_source == "recorded host host.json" and lab.assumed == ()
    refused = planned("mi308x-cpx-refused").hosts[0]
    assert "compute partition CPX" in refused.problem and refused.instances == ()
    assert refused.files and refused.packages  # the other roles are planned all the same


def test_the_plans_instance_files_are_the_vllm_roles():
    """The recorded lab-1 host gives the same environment files and units as the vllm role's plan
    of the same read (``tests/fixtures/plans/lab-1/expected.json``)."""
    host = planned("lab-1-recorded").hosts[0]
    role = json.loads((ROOT / "tests" / "fixtures" / "plans" / "lab-1" / "expected.json").read_text())
    for instance in host.instances:
        files = {f["path"]: f["text"] for f in role["instances"][instance.name]["files"] if "text" in f}
        assert files == {instance.env_file: instance.env_text, instance.unit_path: instance.unit_text}
        printed = {f.path: f.content for f in host.files}
        assert printed[instance.env_file] == instance.env_text and printed[instance.unit_path] == instance.unit_text


def test_the_json_is_stable_and_sorted():
    first, second = to_json(planned("two-services")), to_json(planned("two-services"))
    assert first == second
    data = json.loads(first)
    assert json.dumps(data) == json.dumps(data, sort_keys=True)  # every object's keys in order
    assert max(len(line) for line in first.splitlines() if not line.startswith('  "')) < 2000  # an item a line


def test_hosts_of_one_kind_are_planned_once_and_as_each_alone(lab_data):
    config = host_config(lab_data)
    plan = plan_fleet([("lab-1", config, ["lab"]), ("lab-2", host_config(lab_data), ["lab", "canary"])])
    alone = plan_host("lab-2", host_config(lab_data), None, ["lab", "canary"])
    assert plan.hosts[1] == alone and plan.hosts[0].files is plan.hosts[1].files


def test_secrets_appear_by_name_only(lab_data):
    token = "hf_planMustNeverShow4242"
    config = host_config({**lab_data, "vllm_secret_env": {"HF_TOKEN": Secret(token)}})
    plan = plan_fleet([("lab-1", config, ["lab"])])
    outputs = [to_json(plan), render.plan_text(plan, files=True)]
    assert all(token not in text for text in outputs)
    secrets = [f for f in plan.hosts[0].files if f.source == "secret"]
    assert secrets and all(f.secret_names == ("HF_TOKEN",) and f.content is None for f in secrets)
    assert "HF_TOKEN (values not shown)" in outputs[1]


def test_plan_host_reads_its_data_only_and_never_raises_for_an_unsupported_os(lab_data):
    facts = sources.HostFacts("test", sources.default_facts().topology, os_id="centos", os_version="9", assumed=())
    plan = plan_host("x", host_config(lab_data), facts)
    assert "centos" in plan.problem.lower() and plan.instances  # instances still placed


@pytest.mark.parametrize("flag", ["--json", "--files"])
def test_plan_of_prod_runs_with_every_socket_call_refused_and_prints_the_same_bytes_twice(
    flag, no_network, monkeypatch, capsys
):
    monkeypatch.chdir(ROOT)
    outputs = []
    for _ in range(2):
        assert entry.main(["plan", PROD, flag]) == 0
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err
        # the example pins the shipped placeholder digest: said as `rocmfleet validate` says it, then the summary
        warning, summary = captured.err.splitlines()
        assert warning.startswith("rocmfleet: warning: llama-3.3-70b: the image digest is the placeholder ")
        assert summary.startswith("rocmfleet plan: 3 host(s), 1 service(s), 24 replica(s);"), captured.err
        outputs.append(captured.out)
    assert outputs[0] == outputs[1] and outputs[0]
    assert no_network == []
    if flag == "--json":
        plan = json.loads(outputs[0])
        assert [h["name"] for h in plan["hosts"]] == ["mi300x-a01", "mi300x-a02", "mi300x-a03"]
    else:
        assert f"{render.FILE_HEADER}mi300x-a01 /etc/docker/daemon.json (mode 644, owner root:root" in outputs[0]


@pytest.mark.parametrize(
    "argv, said",
    [
        (["plan", PROD, "--limit", "gpu-9"], "--limit gpu-9 matches no host"),
        (["plan", PROD, "--topology", "no/such/file"], "--topology no/such/file: no such file or directory"),
        (["plan", "inventories/none.py"], "no such inventory file"),
    ],
)
def test_bad_options_exit_2_with_a_message_and_a_summary(argv, said, no_network, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert entry.main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and err.endswith("rocmfleet plan: nothing planned (exit 2)\n") and "Traceback" not in err


def test_limit_and_exclude_pick_hosts_as_the_fleet_commands_do(no_network, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert entry.main(["plan", PROD, "--limit", "gpu_nodes", "--exclude", "mi300x-a02", "--json"]) == 0
    assert [h["name"] for h in json.loads(capsys.readouterr().out)["hosts"]] == ["mi300x-a01", "mi300x-a03"]


def test_topology_sources(tmp_path):
    lines = sources.default_topology_lines()
    (tmp_path / "topo.txt").write_text("\n".join(lines) + "\n")
    from_file = sources.load(str(tmp_path / "topo.txt"))
    assert from_file.topology == sources.default_facts().topology and from_file.assumed == ("device_gids", "os")
    (tmp_path / "host.json").write_text(json.dumps({"topology": lines, "device_gids": [44, 993, 44]}))
    host = sources.load(str(tmp_path / "host.json"))
    assert host.device_gids == (44, 993) and host.assumed == ("os",)
    (tmp_path / "bad.json").write_text(json.dumps({"topology": lines, "device_gids": "44"}))
    with pytest.raises(sources.SourceError, match="'device_gids' is a list of group ids"):
        sources.load(str(tmp_path / "bad.json"))
    (tmp_path / "cut.txt").write_text("\n".join(lines[:-1]))
    with pytest.raises(sources.SourceError, match=r"cut\.txt: .*cut short"):
        sources.load(str(tmp_path / "cut.txt"))


def _converged_read(host) -> list[str]:
    """``HostState`` lines of a host holding every item of ``host`` (a ``HostPlan``) as wanted."""
    from rocmfleet.plan.drift import WantedAbsent, WantedDir, WantedPackage, WantedUnit, plan_wanted

    lines = []
    for want in plan_wanted(host):
        if isinstance(want, WantedUnit):
            lines.append(
                {"kind": "unit", "unit": want.unit, "load": "loaded", "active": "active", "enabled": "enabled"}
            )
        elif isinstance(want, WantedPackage):
            version = want.version.replace("*", "1") if want.version else "1.0"
            lines.append(
                {"kind": "pkg", "package": want.name, "status": "hi " if want.held else "ii ", "version": version}
            )
        elif isinstance(want, WantedAbsent):
            lines.append({"kind": "path", "path": want.path, "type": "missing"})
        else:
            kind = "dir" if isinstance(want, WantedDir) else "file"
            sha = getattr(want, "sha256", "")
            owner = {"user": want.user or "root", "group": want.group or "root"}
            lines.append(
                {"kind": "path", "path": want.path, "type": kind, "mode": want.mode or "644", **owner, "sha256": sha}
            )
    return [json.dumps(line) for line in lines]


def test_drift_of_a_host_plan_is_empty_on_a_converged_read_and_names_each_roles_change():
    from rocmfleet.facts.state import parse_state
    from rocmfleet.plan.drift import drift, plan_wanted, query

    host = planned("lab-1-recorded").hosts[0]
    lines = _converged_read(host)
    asked = query(host)
    assert asked["units"] == [u.unit for u in host.units] and asked["packages"] == [p.name for p in host.packages]
    assert {json.loads(line).get("path") for line in lines} - {None} == set(asked["paths"])
    assert drift(plan_wanted(host), parse_state([*lines, '{"kind":"end"}'])) == []
    # one file of each role edited by hand, a held package released, a removed file back, a unit stopped
    edited_files = {f.path for f in host.files if f.content is not None}
    by_role = {}
    for f in host.files:
        if f.content is not None:
            by_role.setdefault(f.role, f.path)
    assert set(by_role) == {"base", "rocm", "tuning", "exporter", "docker", "vllm"} and edited_files
    changed = []
    for line in lines:
        item = json.loads(line)
        if item.get("path") in by_role.values():
            item["sha256"] = "0" * 64
        if item.get("package") == "amdgpu-dkms":
            item["status"] = "ii "
        if item.get("unit") == "docker.service":
            item["active"] = "failed"
        changed.append(json.dumps(item))
    found = [str(d) for d in drift(plan_wanted(host), parse_state([*changed, '{"kind":"end"}']))]
    assert [d.split(":")[0] for d in found if ": content " in d] == list(by_role.values())
    assert "amdgpu-dkms: held not held, want held" in found
    assert "docker.service: active failed, want active" in found
    assert len(found) == len(by_role) + 2


def test_a_shipped_recording_by_name_and_a_placement_problem_said_in_the_text(no_network, monkeypatch, capsys):
    assert "mi308x-8gpu-cpx" in sources.shipped_names()
    assert sources.load("mi308x-8gpu-cpx").source == "shipped mi308x-8gpu-cpx"
    monkeypatch.chdir(ROOT)
    assert entry.main(["plan", PROD, "--limit", "mi300x-a01", "--topology", "mi308x-8gpu-cpx"]) == 1
    captured = capsys.readouterr()
    assert "  topology: shipped mi308x-8gpu-cpx\n  assumed: device_gids, os " in captured.out
    assert "\n  problem: placement: cannot place the instances:\n      - host mi300x-a01: " in captured.out
    # said of the topology the plan took, which may not be the host's own
    assert " (on the topology shipped mi308x-8gpu-cpx)\n" in captured.out
    assert "not placed or not supported: mi300x-a01;" in captured.err and no_network == []


@pytest.mark.parametrize("case", CASES)
def test_a_host_plan_loads_back_from_its_json_as_it_was(case):
    """``host_from_json(to_json(plan)) == plan`` for every host of every case (what ``rocmfleet
    check`` hands its check process and reads back there)."""
    for host in planned(case).hosts:
        assert host_from_json(to_json(host)) == host
        assert host_from_dict(json.loads(json.dumps(to_dict(host)))) == host


def test_a_host_plan_that_is_not_one_is_refused_naming_the_key():
    with pytest.raises(ValueError, match=r"check\.json: unknown key\(s\) colour of HostPlan"):
        host_from_dict({"colour": "red", "contents": {}}, "check.json")
    plan = json.loads(to_json(planned(CASES[0]).hosts[0]))
    plan["contents"] = {}
    with pytest.raises(ValueError, match=r"plan\.files\[\d+\]\.content_sha256: \w+ is not in the plan's contents"):
        host_from_dict(plan)


def test_facts_from_a_hosts_read_name_the_deploys_read_items():
    """``rocmfleet check``'s parent plans a host on the facts of its own read (``sources.from_read``,
    which ``status`` and ``--dry`` take too through ``hostdrift.read_facts``): the read's names are
    the deploy's, and the lab's recorded read gives its topology, group ids, OS and kernel."""
    from rocmfleet.domain import vllm
    from rocmfleet.facts.state import parse_state
    from rocmfleet.plan import hostdrift, vllmplan

    assert (sources.TOPOLOGY_RUN, sources.RENDER_GLOB, sources.KFD) == (
        vllmplan.TOPOLOGY_RUN,
        vllmplan.DEVICE_GLOB,
        vllm.KFD,
    )
    got = parse_state(json.loads((ROOT / "tests" / "fixtures" / "plans" / "lab-1" / "facts.json").read_text())["state"])
    facts = sources.from_read(got)
    assert facts == hostdrift.read_facts(got) and facts.source == "read from the host" and facts.assumed == ("os",)
    assert facts.topology is not None and facts.device_gids == (992,)
    bare = parse_state(['{"kind":"end"}'])
    assert sources.from_read(bare) == sources.HostFacts("read from the host", None, assumed=("device_gids", "os"))
