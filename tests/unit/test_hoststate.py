"""The composite ``HostState`` fact (``rocmfleet/scripts/state.sh``), its parsing, and the pure
comparisons roles make with it (:mod:`rocmfleet.plan.hoststate`, :mod:`rocmfleet.plan.vllmplan`)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from rocmfleet import scripts
from rocmfleet.config.settings import host_config
from rocmfleet.domain import lastgood, vllm, vllmfiles
from rocmfleet.facts.state import HostState, parse_state, state_args
from rocmfleet.facts.topology import parse_fact_output
from rocmfleet.plan import drift, hostdrift, hoststate, vllmplan
from rocmfleet.plan.build import plan_host
from rocmfleet.plan.drift import WantedAbsent
from rocmfleet.plan.hoststate import WantedFile
from rocmfleet.plan.instance import (
    HostPlacement,
    instance_files,
    last_good_of,
    place_host,
    secrets_content,
    vllm_settings,
)
from tests.unit.test_vllm_role import DATA, TOPOLOGY, changed, run_role

# Output of state.sh on a Debian 12 host (one line per item, then the end line).
OUTPUT = [
    '{"kind":"path","path":"/etc/a.conf","type":"file","mode":"644","user":"root","group":"root","gid":"0",'
    '"sha256":"98ea6e4f216f2fb4b69fff9b3a44842c38686ca685f3f55dc48c5d3fb1107be4"}',
    '{"kind":"path","path":"/etc/d","type":"dir","mode":"700","user":"root","group":"root","gid":"0","sha256":""}',
    '{"kind":"path","path":"/etc/gone","type":"missing"}',
    '{"kind":"sysctl","key":"kernel.numa_balancing","value":"0"}',
    '{"kind":"sysctl","key":"no.such","value":null}',
    '{"kind":"image","image":"r:t@sha256:ab","id":null}',
    '{"kind":"marked","glob":"/etc/systemd/system/vllm-*.service","path":"/etc/systemd/system/vllm-a.service"}',
    '{"kind":"ready","key":"a","rc":3}',
    '{"kind":"unit","unit":"docker.service","load":"loaded","active":"active","enabled":"enabled"}',
    '{"kind":"pkg","package":"curl","status":"ii ","version":"7.88.1-10+deb12u8"}',
    '{"kind":"os","id":"debian","version_id":"12","codename":"bookworm","kernel":"6.1.0-28-amd64"}',
    '{"kind":"end"}',
]


def test_output_is_parsed_per_item():
    got = HostState().process(OUTPUT)
    assert got.paths["/etc/a.conf"].sha256.startswith("98ea6e4f")
    assert (got.paths["/etc/d"].type, got.paths["/etc/d"].mode) == ("dir", "700")
    assert got.paths["/etc/gone"].type == "missing"
    assert {k: v.value for k, v in got.sysctls.items()} == {"kernel.numa_balancing": "0", "no.such": None}
    assert got.images == {"r:t@sha256:ab": None}
    assert got.marked == {"/etc/systemd/system/vllm-*.service": ["/etc/systemd/system/vllm-a.service"]}
    assert got.ready == {"a": 3}
    assert got.units["docker.service"].enabled == "enabled"
    assert got.packages["curl"].version == "7.88.1-10+deb12u8"
    assert (got.os.id, got.os.version_id, got.os.kernel) == ("debian", "12", "6.1.0-28-amd64")


@pytest.mark.parametrize(
    "lines",
    [[], OUTPUT[:-1], ['{"kind":"path"}', '{"kind":"end"}'], ["not json", '{"kind":"end"}'],
     ['{"kind":"error","message":"unknown item kind x"}', '{"kind":"end"}']],
    ids=["empty", "cut-short", "incomplete-item", "not-json", "error-line"],
)  # fmt: skip
def test_empty_truncated_or_unknown_output_is_an_error_not_a_clean_state(lines):
    with pytest.raises(ValueError):
        parse_state(lines)


def test_no_output_at_all_is_the_unknown_state():
    got = HostState.default()
    assert got.paths == {} and got.units == {}


def run_script(*args: object) -> list[str]:
    proc = subprocess.run(["sh", "-c", scripts.command("state.sh", *args)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_the_script_reads_files_directories_and_marked_files(tmp_path):
    conf = tmp_path / "a.conf"
    conf.write_text("hello\n")
    os.chmod(conf, 0o640)
    (tmp_path / "d").mkdir(mode=0o700)
    (tmp_path / "vllm-a.service").write_text("# Managed by rocmfleet (roles/vllm). Image x\n")
    (tmp_path / "vllm-other.service").write_text("[Unit]\n")
    glob = str(tmp_path / "vllm-*.service")
    got = parse_state(
        run_script(
            *state_args(
                paths=[str(conf), str(tmp_path / "d"), str(tmp_path / "nope")],
                sysctls=["no.such.key"],
                os=True,
                marked=("# Managed by rocmfleet (roles/vllm).", [glob]),
            )
        )
    )
    item = got.paths[str(conf)]
    assert (item.type, item.mode, item.sha256) == ("file", "640", hashlib.sha256(b"hello\n").hexdigest())
    assert hoststate.file_ok(got, WantedFile(str(conf), b"hello\n", "640"))
    assert not hoststate.file_ok(got, WantedFile(str(conf), b"hello\n", "644"))
    assert not hoststate.file_ok(got, WantedFile(str(conf), b"bye\n", "640"))
    assert drift.drift([drift.WantedDir(str(tmp_path / "d"), "700")], got) == []
    assert drift.drift([drift.WantedDir(str(tmp_path / "d"), "755")], got) == [
        drift.Drift(str(tmp_path / "d"), "mode", "700", "755")
    ]
    assert drift.drift([WantedAbsent(str(tmp_path / "nope"))], got) == []
    assert drift.drift([WantedAbsent(str(conf))], got) == [drift.Drift(str(conf), "type", "file", "missing")]
    assert got.sysctls["no.such.key"].value is None
    assert got.os is not None and got.os.kernel == os.uname().release
    assert got.marked == {glob: [str(tmp_path / "vllm-a.service")]}


def test_the_script_quotes_odd_paths_and_passes_probe_arguments_whole(tmp_path):
    odd = tmp_path / 'quote"and\\back'
    odd.write_text("x")
    seen = tmp_path / "args"
    probe = f'printf "%s|" "$@" > {seen}; exit 3'
    probe_args = ["ready", "a", "3", "live", "8000", "two words"]
    lines = run_script("path", str(odd), "probe", probe, *probe_args, "path", str(odd))
    got = parse_state(lines)
    assert got.paths[str(odd)].type == "file"
    assert got.ready == {"a": 3}
    assert seen.read_text() == "live|8000|two words|"


@pytest.mark.parametrize("name", ["plain-1.2_x", "with space", "ünïcode", "a,b=c:d@e+f%g~h"])
def test_names_read_without_a_process_are_the_same_as_escaped_ones(tmp_path, name):
    # state.sh escapes a string with sed only when it holds a character outside its plain set
    path = tmp_path / name
    path.write_text("x")
    got = parse_state(run_script("path", str(path), "marker", "x", "marked", str(tmp_path / "*")))
    assert got.paths[str(path)].type == "file"
    assert got.paths[str(path)].sha256 == hashlib.sha256(b"x").hexdigest()
    assert got.marked == {str(tmp_path / "*"): [str(path)]}


def test_every_path_is_read_in_one_batch_with_the_answers_one_by_one_would_give(tmp_path):
    # state.sh reads the existing paths with one stat and one sha256sum (issue 43); each answer must
    # be the path's own, whatever its name, its kind and its place among the others
    names = ["a", "-dash", "back\\slash", "two  spaces", "ünï"]
    for index, name in enumerate(names):
        (tmp_path / name).write_text(f"content {index}")
    os.chmod(tmp_path / "-dash", 0o600)
    (tmp_path / "dir").mkdir(mode=0o750)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    paths = [str(tmp_path / n) for n in [*names, "dir", "dangling", "missing"]]
    got = parse_state(run_script(*state_args(paths=paths)))
    assert set(got.paths) == set(paths)
    for index, name in enumerate(names):
        item = got.paths[str(tmp_path / name)]
        assert (item.type, item.sha256) == ("file", hashlib.sha256(f"content {index}".encode()).hexdigest()), name
        assert item.mode == ("600" if name == "-dash" else format((tmp_path / name).stat().st_mode & 0o777, "o"))
    assert (got.paths[str(tmp_path / "dir")].type, got.paths[str(tmp_path / "dir")].mode) == ("dir", "750")
    assert got.paths[str(tmp_path / "dangling")].type == "link"
    assert got.paths[str(tmp_path / "missing")].type == "missing"
    # names with control characters (a newline: read on its own, outside the batch) come back as
    # one by one they would (the JSON string drops control characters either way)
    for odd in ["new\nline", "tab\tin"]:
        (tmp_path / odd).write_text(odd)
    paths += [str(tmp_path / "new\nline"), str(tmp_path / "tab\tin")]
    got = parse_state(run_script(*state_args(paths=paths)))
    one_by_one = {}
    for path in paths:
        one_by_one.update(parse_state(run_script(*state_args(paths=[path]))).paths)
    assert got.paths == one_by_one
    assert got.paths[str(tmp_path / "newline")].sha256 == hashlib.sha256(b"new\nline").hexdigest()


def test_an_unknown_unit_or_package_is_unknown_not_clean():
    got = parse_state(['{"kind":"end"}'])
    assert drift.drift([drift.WantedUnit("docker.service")], got) == [drift.Drift("docker.service", "not read")]
    assert not hoststate.file_ok(got, WantedFile("/etc/x", b""))
    assert drift.drift([drift.WantedDir("/etc")], got) == [drift.Drift("/etc", "not read")]
    assert drift.drift([WantedAbsent("/etc/x")], got) == [drift.Drift("/etc/x", "not read")]


# -- vllm --------------------------------------------------------------------------------------


def converged_output(config, topology, *, skip: str = "", ready: int = 0) -> list[str]:
    """state.sh output of a host where the vllm role left everything as wanted (less ``skip``)."""
    lines = []

    def path(p, kind="file", mode="644", content=b"", user="root", group="root", gid="0"):
        if p == skip:
            return
        sha = hashlib.sha256(content).hexdigest() if kind == "file" else ""
        lines.append(
            json.dumps(
                {"kind": "path", "path": p, "type": kind, "mode": mode, "user": user, "group": group, "gid": gid,
                 "sha256": sha}
            )
        )  # fmt: skip

    for p, mode, _, _ in vllmplan.directories(config):
        path(p, "dir", mode)
    for f in vllmplan.script_files():
        path(f.path, mode=f.mode, content=f.content)
    staged = vllmplan.staging(config)
    if staged is not None:  # a hub model, staged: its stamp and snapshot
        path(staged.stamp)
        path(staged.present, "dir", "755")
    path("/dev/kfd", "other", "660", gid="992")
    placed = place_host(config, topology, [992])
    assert isinstance(placed, HostPlacement)
    secrets = secrets_content(config).reveal().encode()
    for inst in config.instances():
        env, unit = instance_files(config, inst, placed).files
        files = last_good_of(inst.name)
        record = lastgood.serve_record(
            config.image.reference,
            vllm.serve_args(vllm_settings(config), inst),
            vllm.container_env(vllm_settings(config), placed.placements[inst.name]),
        )
        for name, want in (("unit", unit), ("env", env), ("secrets", WantedFile("", secrets, "600"))):
            path(files.live[name], mode=want.mode, content=want.content)
            path(files.saved(name), mode="600", content=want.content)
        path(files.serve_json, mode="600", content=record.encode())
        names = vllmfiles.files_of(inst)
        lines.append(
            json.dumps({"kind": "unit", "unit": names.unit, "load": "loaded", "active": "active", "enabled": "enabled"})
        )
        lines.append(json.dumps({"kind": "ready", "key": inst.name, "rc": ready}))
        lines.append(
            json.dumps({"kind": "marked", "glob": vllmplan.UNIT_GLOB, "path": f"/etc/systemd/system/{names.unit}"})
        )
    lines.append(json.dumps({"kind": "image", "image": config.image.reference, "id": "sha256:" + "cd" * 32}))
    lines += [json.dumps({"kind": "run", "key": vllmplan.TOPOLOGY_RUN, "text": t}) for t in TOPOLOGY]
    lines.append(json.dumps({"kind": "ran", "key": vllmplan.TOPOLOGY_RUN, "rc": 0}))
    return [*lines, '{"kind":"end"}']


def test_a_converged_host_needs_nothing():
    config, topology = host_config(DATA), parse_fact_output(TOPOLOGY)
    todo = hostdrift.vllm_plan("", config, topology, parse_state(converged_output(config, topology)), planner=plan_host)
    assert todo.why == {}
    assert todo.clean


def test_one_changed_file_makes_only_its_instance_dirty():
    config, topology = host_config(DATA), parse_fact_output(TOPOLOGY)
    todo = hostdrift.vllm_plan(
        "",
        config,
        topology,
        parse_state(converged_output(config, topology, skip="/etc/rocmfleet/vllm/b.env")),
        planner=plan_host,
    )
    assert todo.dirty == ["b"]
    # (its last good copy still holds what the file should: not a reason of its own)
    assert todo.why["b"] == [
        "/etc/rocmfleet/vllm/b.env: not reported by the read",
    ]
    assert not todo.clean


def test_an_instance_not_ready_is_dirty_and_an_orphan_is_found():
    config, topology = host_config(DATA), parse_fact_output(TOPOLOGY)
    lines = converged_output(config, topology, ready=1)
    lines.insert(
        0, json.dumps({"kind": "marked", "glob": vllmplan.UNIT_GLOB, "path": "/etc/systemd/system/vllm-old.service"})
    )
    todo = hostdrift.vllm_plan("", config, topology, parse_state(lines), planner=plan_host)
    assert todo.dirty == ["a", "b"]
    assert todo.orphans == ["old"]


def test_without_topology_every_instance_goes_through_the_operations():
    config, topology = host_config(DATA), parse_fact_output(TOPOLOGY)
    todo = hostdrift.vllm_plan("", config, None, parse_state(converged_output(config, topology)), planner=plan_host)
    assert todo.dirty == ["a", "b"]
    assert todo.placed is None


def test_a_changed_image_makes_every_instance_dirty():
    config, topology = host_config(DATA), parse_fact_output(TOPOLOGY)
    lines = converged_output(config, topology)
    newer = host_config({**DATA, "vllm_image_digest": "sha256:" + "ef" * 32})
    todo = hostdrift.vllm_plan("", newer, topology, parse_state(lines), planner=plan_host)
    assert todo.dirty == ["a", "b"]
    assert todo.image_missing


def test_the_role_calls_no_operation_on_a_converged_host(tmp_path):
    config, topology = host_config(DATA), parse_fact_output(TOPOLOGY)
    # No GpuTopology answer: the one HostState read holds the topology too.
    operations, _ = run_role(tmp_path, {"' state.sh ": converged_output(config, topology)})
    assert operations == []


def test_the_role_runs_the_operations_of_the_changed_instance_only(tmp_path):
    config, topology = host_config(DATA), parse_fact_output(TOPOLOGY)
    responses = {
        "timeout 20 sh -c '": TOPOLOGY,
        "' state.sh ": converged_output(config, topology, skip="/etc/rocmfleet/vllm/b.env"),
        "stat -c %g /dev/kfd": ["992"],
        "vllm-probe.sh ready 80": ["ready"],
        "vllm-probe.sh owner 80": ["free"],
    }
    operations, _ = run_role(tmp_path, responses)
    names = [op["name"].removeprefix("vllm | ") for op in operations]
    assert not [name for name in names if "vllm-a" in name or "/a." in name]
    assert "Render /etc/rocmfleet/vllm/b.env and vllm-b.service" in changed(operations)
    assert names[-2:] == [
        "Wait until every vLLM instance is ready; roll back each one that is not",
        "Keep the files of vllm-b.service as its last good version",
    ]
    assert not [name for name in names if name.startswith("Create")]


def test_file_text_and_script_output_come_back_in_order(tmp_path):
    grub = tmp_path / "grub"
    grub.write_text('GRUB_DEFAULT=0\n\tGRUB_CMDLINE_LINUX="a \\"b\\""\nlast without newline')
    lines = run_script(*state_args(paths=[str(grub)], texts=[str(grub)], runs=[("t", "echo one; echo two; exit 3")]))
    got = parse_state(lines)
    assert got.texts[str(grub)] == ["GRUB_DEFAULT=0", '\tGRUB_CMDLINE_LINUX="a \\"b\\""', "last without newline"]
    assert got.runs == {"t": (3, ["one", "two"])}


def test_the_topology_from_the_read_or_unknown():
    topo = [json.dumps({"kind": "run", "key": vllmplan.TOPOLOGY_RUN, "text": t}) for t in TOPOLOGY]
    ran = json.dumps({"kind": "ran", "key": vllmplan.TOPOLOGY_RUN, "rc": 0})
    assert vllmplan.topology_of(parse_state([*topo, ran, '{"kind":"end"}'])) == parse_fact_output(TOPOLOGY)
    assert vllmplan.topology_of(parse_state(['{"kind":"end"}'])) == "unknown"
    timed_out = json.dumps({"kind": "ran", "key": vllmplan.TOPOLOGY_RUN, "rc": 124})
    assert vllmplan.topology_of(parse_state([*topo[:3], timed_out, '{"kind":"end"}'])) == "unknown"
    cut = [*topo[:-1], ran, '{"kind":"end"}']  # no @@end: the GpuTopology parser refuses it
    assert vllmplan.topology_of(parse_state(cut)) == "unknown"
    no_kfd = [json.dumps({"kind": "run", "key": vllmplan.TOPOLOGY_RUN, "text": t}) for t in (TOPOLOGY[0], "@@no-kfd")]
    assert vllmplan.topology_of(parse_state([*no_kfd, ran, '{"kind":"end"}'])) is None


def test_text_lines_lose_control_characters_nul_included_and_keep_tabs_and_stray_bytes(tmp_path):
    """A NUL (a file half-written at a power loss) or another control character is dropped, a tab
    kept, a CR dropped; a byte that is not UTF-8 reaches the parser, which decodes it as it can:
    one damaged file is never the whole read's error (the deploy's and the check's)."""
    grub = tmp_path / "grub"
    grub.write_bytes(b'GRUB_DEFAULT=0\x00\nGRUB_CMDLINE_LINUX="a\tb"\x01\r\n# caf\xe9\nlast')
    args = ["sh", "-c", scripts.command("state.sh", *state_args(texts=[str(grub)]))]
    out = subprocess.run(args, capture_output=True, check=True).stdout
    got = parse_state(out.decode("utf-8", "replace").splitlines())
    assert got.texts[str(grub)] == ["GRUB_DEFAULT=0", 'GRUB_CMDLINE_LINUX="a\tb"', "# caf\ufffd", "last"]


def test_a_newline_in_a_run_name_is_dropped_not_a_broken_line():
    got = parse_state(run_script(*state_args(runs=[("two\nlines", "echo x")])))
    assert got.runs == {"twolines": (0, ["x"])}  # its output lines and its status under one key


def test_a_changed_secret_value_makes_every_instance_dirty_though_the_plan_holds_names_only():
    from rocmfleet.config.vault import Secret

    topology = parse_fact_output(TOPOLOGY)
    config = host_config({**DATA, "vllm_secret_env": {"HF_TOKEN": Secret("hf_before")}})
    lines = converged_output(config, topology)
    assert hostdrift.vllm_plan("", config, topology, parse_state(lines), planner=plan_host).clean
    other = host_config({**DATA, "vllm_secret_env": {"HF_TOKEN": Secret("hf_changed")}})
    todo = hostdrift.vllm_plan("", other, topology, parse_state(lines), planner=plan_host)
    assert todo.dirty == ["a", "b"]
    before = hashlib.sha256(secrets_content(config).reveal().encode()).hexdigest()
    assert [r.split(",")[0] for r in todo.why["a"]] == [
        f"/etc/rocmfleet/vllm/a.secrets: content {before}",
        "last good copies differ from the live files",
    ]
    assert "hf_changed" not in str(todo.why)


def test_the_roles_directories_and_scripts_are_its_plan_items_that_drift():
    config, topology = host_config(DATA), parse_fact_output(TOPOLOGY)
    script = f"{vllm.SCRIPT_DIR}/vllm-unit.sh"
    lines = [
        line.replace('"mode": "755"', '"mode": "700"', 1) if f'"{vllm.SCRIPT_DIR}"' in line or f'"{script}"' in line
        else line
        for line in converged_output(config, topology)
    ]  # fmt: skip
    todo = hostdrift.vllm_plan("", config, topology, parse_state(lines), planner=plan_host)
    assert [(d.path, d.role, d.mode) for d in todo.directories] == [(vllm.SCRIPT_DIR, "vllm", "755")]
    assert [(f.path, f.mode) for f in todo.scripts] == [(script, "755")]
    assert todo.dirty == [] and not todo.clean
    assert vllmplan.dry_lines(todo, config.image.reference)[-1] == (
        f"would create or fix {vllm.SCRIPT_DIR}, {script} (vllm role)"
    )
