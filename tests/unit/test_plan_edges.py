"""Edges of the offline commands (``rocmfleet plan``, ``rollout --dry``) an operator can hit: a
closed pipe, a service of mixed shapes, a host whose image another group pins, odd ``--topology``
files, every problem at once, a vault without its password."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rocmfleet import entry
from rocmfleet.config import vault
from rocmfleet.fleet.rollout import batches
from rocmfleet.plan import sources
from rocmfleet.project import PROFILES_DIR

ROOT = Path(__file__).resolve().parents[2]
RACK24 = ROOT / "tests" / "fixtures" / "sites" / "rack24" / "inventory.py"


def test_a_closed_standard_output_gets_one_line_and_exit_141_not_a_traceback():
    # `rocmfleet validate ... >&-`: Python sets sys.stdout to None; pyinfra's import reads its isatty()
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from rocmfleet.entry import main; sys.argv[0] = 'rocmfleet'; raise SystemExit(main())",
            "validate",
            str(RACK24),
        ],
        stderr=subprocess.PIPE,
        cwd=ROOT,
        preexec_fn=lambda: os.close(1),
        timeout=120,
    )
    err = child.stderr.decode()
    assert child.returncode == 141, err
    assert err.strip() == "rocmfleet: standard output is closed; nothing was done", err


def test_a_reader_that_stops_early_gets_no_traceback_and_exit_141():
    # `rocmfleet plan ... | head -1`: the pipe's reader goes away after one line
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from rocmfleet.entry import main; sys.argv[0] = 'rocmfleet'; raise SystemExit(main())",
            "plan",
            str(RACK24),
            "--files",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # the reader is gone before the plan is written, as `| head -1` once it has its line
    err = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err
    assert err.endswith("rocmfleet: plan: standard output was closed (its reader ended): output cut short\n"), err


@pytest.mark.parametrize("unbuffered", ["", "1"])
def test_a_reader_that_stops_in_the_middle_gets_exit_141(unbuffered):
    # `rocmfleet plan ... --files | head -c 100`: the reader goes away after 100 bytes of a plan far
    # over the pipe's 64 KiB; with PYTHONUNBUFFERED=1 (container images, CI) the kernel's short count
    # of the one write(2) was taken as the whole, and the command ended 0 (new-user trial)
    import os

    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | (
        {"PYTHONUNBUFFERED": unbuffered} if unbuffered else {}
    )
    child = subprocess.Popen(
        [sys.executable, "-m", "rocmfleet.entry", "plan", str(RACK24), "--files"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )
    assert child.stdout is not None and child.stderr is not None
    assert len(child.stdout.read(100)) == 100
    child.stdout.close()  # as `head -c 100` once it has its bytes, with the rest of the plan unwritten
    err = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert "rocmfleet: plan: standard output was closed (its reader ended): output cut short\n" in err, err


def rack24_copy(tmp_path: Path) -> Path:
    """The 24-host site copied to ``tmp_path`` (``tmp_path/site/inventory.py``), to edit."""
    site = tmp_path / "site"
    shutil.copytree(RACK24.parent, site)
    return site / "inventory.py"


def test_a_service_whose_replicas_differ_in_profile_and_image_shows_each(tmp_path, monkeypatch, capsys):
    # llama-4-scout runs on three racks, each on its own image pin, and rc-08 on a profile of its own
    # (another name, the same served_model_name): the service line used to say the first host's only
    inventory = rack24_copy(tmp_path)
    profiles = inventory.parent / "group_vars" / "profiles"
    profiles.mkdir()
    scout = (PROFILES_DIR / "llama-4-scout.yml").read_text()
    (profiles / "scout-b.yml").write_text(scout.replace("name: llama-4-scout\n", "name: scout-b\n", 1))
    (inventory.parent / "group_vars" / "scout_b.yml").write_text("vllm_profile: scout-b\n")
    text = inventory.read_text().replace("\n_check(", '\nscout_b = (["rc-08"], _load("scout_b"))\n\n_check(')
    inventory.write_text(text)
    monkeypatch.chdir(inventory.parent)
    assert entry.main(["plan", str(inventory), "--json"]) == 0
    service = next(s for s in json.loads(capsys.readouterr().out)["services"] if s["name"] == "llama-4-scout")
    assert service["profiles"] == ["llama-4-scout", "scout-b"]
    assert [i["image"].split(":")[1][:9] for i in service["images"]] == ["0.33.0-r1", "0.33.0-r2", "0.33.0-r3"]
    assert [(i["groups"], i["hosts"][-1]) for i in service["images"]] == [
        (["rack_a"], "ra-08"),
        (["rack_b"], "rb-04"),
        (["rack_c"], "rc-08"),
    ]
    assert {r["id"]: r["profile"] for r in service["replicas"]}["rc-08/scout-b-0"] == "scout-b"
    assert entry.main(["plan", str(inventory)]) == 0
    out = capsys.readouterr().out
    assert (
        "  replicas differ: profile llama-4-scout (7), scout-b (1); image registry.example.invalid/vllm:0.33.0-r1@"
        in out
    )
    assert (
        "  on rc-08: 1 replica(s): scout-b-0 (profile scout-b, image registry.example.invalid/vllm:0.33.0-r3@"
        f"sha256:{'3' * 64})" in out
    )
    assert (
        "service qwen3-235b-a22b: 16 replica(s) on 16 host(s)\n  replicas differ: profile qwen3-235b-a22b (16); " in out
    )


def test_a_recorded_host_with_a_misspelt_key_is_refused_naming_the_allowed_ones(tmp_path):
    # "device_gid" used to be ignored: the plan then took the default group id, said as assumed only
    lines = sources.default_topology_lines()
    (tmp_path / "host.json").write_text(json.dumps({"topology": lines, "device_gid": [44]}))
    with pytest.raises(sources.SourceError) as refused:
        sources.load(str(tmp_path / "host.json"))
    assert str(refused.value) == (
        f"--topology {tmp_path / 'host.json'}: unknown key(s) 'device_gid' of a recorded host; "
        "allowed: 'topology', 'device_gids', 'os'"
    )
    (tmp_path / "os.json").write_text(json.dumps({"topology": lines, "os": {"id": "ubuntu", "version": "24.04"}}))
    with pytest.raises(sources.SourceError, match=r"'os' is an object of strings \['codename', 'id', 'kernel', "):
        sources.load(str(tmp_path / "os.json"))
    os = {"id": "ubuntu", "version_id": "24.04", "codename": "noble"}
    (tmp_path / "ok.json").write_text(json.dumps({"topology": lines, "os": os}))
    assert sources.load(str(tmp_path / "ok.json")).os_codename == "noble"


def test_a_recorded_host_with_a_partial_os_and_bad_gids_is_refused_with_both_problems(tmp_path):
    # a partial os used to be completed with Debian's values ("ubuntu 12"); -5, 2**70 and true were gids
    lines = sources.default_topology_lines()
    spec = tmp_path / "host.json"
    spec.write_text(json.dumps({"topology": lines, "device_gids": [-5, 2**70, True], "os": {"id": "ubuntu"}}))
    with pytest.raises(sources.SourceError) as refused:
        sources.load(str(spec))
    assert str(refused.value) == (
        f"--topology {spec}: 'device_gids' is a list of group ids (integers 0 to 4294967294), not "
        f"[-5, {2**70}, True]; 'os' lacks 'version_id', 'codename' (recorded: {{'id': 'ubuntu'}}); "
        "give each of ['id', 'version_id', 'codename']"
    )


def test_plan_shows_inline_secrets_by_name_without_the_vault_password(tmp_path, monkeypatch, capsys):
    # the plan shows a secret by its name only: it needs no vault password to say so
    inventory = rack24_copy(tmp_path)
    token = "hf_not_to_be_seen_0123456789"
    secret = vault.inline(token, password=b"the vault password").replace("\n", "\n  ")
    with (inventory.parent / "group_vars" / "all.yml").open("a") as f:
        f.write(f"vllm_secret_env:\n  HF_TOKEN: {secret}\n")
    for name in (*vault.PASSWORD_FILE_VARIABLES, "ANSIBLE_VAULT_IDENTITY_LIST", "ANSIBLE_VAULT_PASSWORD_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(inventory.parent)
    assert entry.main(["plan", str(inventory), "--files", "--limit", "ra-01"]) == 0
    out, err = capsys.readouterr()
    assert "secret: HF_TOKEN (values not shown)" in out and token not in out + err
    assert "--env HF_TOKEN" in out
    # nor do the scrape targets, which hold no secret (new-user trial: it asked for the password)
    assert entry.main(["metrics", "targets", str(inventory)]) == 0
    out, err = capsys.readouterr()
    assert '"rocmfleet_instance": "qwen3-235b-a22b-0"' in out and token not in out + err
    # the commands that use the value still need the password
    assert entry.main(["validate", str(inventory)]) == 2
    assert "vllm_secret_env.HF_TOKEN: line 4: cannot decrypt (no vault password" in capsys.readouterr().err


def test_a_group_file_that_is_not_yaml_hides_no_problem_of_the_hosts_outside_its_groups(tmp_path, capsys):
    # every problem at once: rack_a's file cannot be read, so its hosts' data is unknown, but rack_b's
    # unknown key was left unsaid until the YAML was mended
    inventory = rack24_copy(tmp_path)
    group_vars = inventory.parent / "group_vars"
    (group_vars / "rack_a.yml").write_text("vllm_env: [unclosed\n")
    (group_vars / "rack_b.yml").write_text((group_vars / "rack_b.yml").read_text() + "vllm_envv: {}\n")
    assert entry.main(["plan", str(inventory)]) == 2
    err = capsys.readouterr().err
    assert "rack_a.yml: line 2: not valid YAML" in err, err
    assert "rack_b.yml: vllm_envv: unknown key" in err and "[hosts: rb-01, rb-02," in err, err
    assert "ra-01" not in err and err.endswith("rocmfleet plan: nothing planned (exit 2)\n")


def test_json_and_files_together_are_refused(capsys):
    # --files was ignored beside --json (whose contents hold every file already)
    with pytest.raises(SystemExit) as ended:
        entry.main(["plan", str(RACK24), "--json", "--files"])
    assert ended.value.code == 2
    assert "argument --files: not allowed with argument --json" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["²", "١", "1e1%", "inf%", "0x10", "1.5", "0", "0%", "150%", "abc", "-1", ""])
def test_max_unavailable_takes_ascii_counts_and_percentages_only(text):
    # "²" passed str.isdigit() and then int() raised ValueError: "invalid literal for int() with base 10"
    with pytest.raises(
        batches.PlanError, match=rf"^--max-unavailable {re.escape(text)}: (expected a count|a percentage)"
    ):
        batches.parse_max_unavailable(text, 16)


def test_max_unavailable_counts_and_percentages():
    assert [batches.parse_max_unavailable(t, 16) for t in ("1", " 2 ", "25%", "12.5%", "1%", "100%")] == [
        1,
        2,
        4,
        2,
        1,
        16,
    ]


def test_topology_from_a_copy_of_the_kfd_directory_and_not_from_a_device(tmp_path):
    # `cp -r /sys/class/kfd/kfd copy`: its topology/ holds the nodes (it was "no KFD node directories")
    nodes = tmp_path / "kfd" / "topology" / "nodes"
    gpu = "cpu_cores_count 0\nsimd_count 1216\nnum_xcc 8\ndevice_id 29857\ngfx_target_version 90402\n"
    gpu += "location_id 1280\ndomain 0\n"
    for node, properties in (("0", "cpu_cores_count 192\nsimd_count 0\n"), ("1", gpu + "drm_render_minor 128\n")):
        (nodes / node).mkdir(parents=True)
        (nodes / node / "properties").write_text(properties)
    facts = sources.load(str(tmp_path / "kfd"))
    assert facts.source == f"kfd tree {tmp_path / 'kfd'}"
    assert facts.topology is not None and len(facts.topology.gpus) == 1
    with pytest.raises(sources.SourceError, match=r"^--topology /dev/null: not a regular file or a directory; "):
        sources.load("/dev/null")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full (a Linux device)")
def test_a_full_disk_under_standard_output_is_said_in_one_line_and_exit_1():
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-c", "from rocmfleet.entry import main; raise SystemExit(main())", "schema"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            check=False,
        )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == "rocmfleet: schema: cannot write standard output: No space left on device; output cut short\n"


def test_an_inventory_that_exits_while_loading_is_bad_input_with_a_summary(tmp_path, capsys):
    # its sys.exit("boom") ended rocmfleet with exit 1 and "boom" alone, no summary
    (tmp_path / "exits.py").write_text('all = (["a"], {})\nimport sys\nsys.exit("boom")\n')
    assert entry.main(["plan", str(tmp_path / "exits.py")]) == 2
    err = capsys.readouterr().err
    assert f"rocmfleet: {tmp_path / 'exits.py'}: exited while loading (sys.exit('boom')); " in err
    assert err.endswith("rocmfleet plan: nothing planned (exit 2)\n")
