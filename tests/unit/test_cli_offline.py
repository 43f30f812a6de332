"""Every CLI option a command refuses is refused before any connection: each case runs the real
``rocmfleet`` entry point on ``inventories/prod.py`` (hosts at ``*.example.internal``) with every
socket connect and name lookup of the process recorded, and must exit 2 having made none."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmfleet import entry
from rocmfleet.fleet.rollout import state as rstate

ROOT = Path(__file__).resolve().parents[2]
PROD = "inventories/prod.py"


CASES = {
    "image-grammar": ["rollout", PROD, "--image", "reg:5000/v:a:b"],
    "image-upper-case": ["rollout", PROD, "--image", "reg:5000/Vllm:1"],
    "image-with-limit": ["rollout", PROD, "--image", "reg:5000/v:new", "--limit", "mi300x-a01"],
    "canary-beyond-fleet": ["rollout", PROD, "--canary", "999"],
    "max-unavailable-beyond-fleet": ["restart", PROD, "--max-unavailable", "999"],
    "restart-soak": ["restart", PROD, "--soak", "5m"],
    "limit-typo": ["rollout", PROD, "--limit", "mi300x-a01,mi300x-a20"],
    "check-timeout-inf": ["check", PROD, "--timeout-s", "inf"],
    "check-parallel-0": ["check", PROD, "--parallel", "0"],
    "check-limit-typo": ["check", PROD, "--limit", "gpu-9"],
    "bench-timeout-nan": ["bench", PROD, "--timeout-s", "nan"],
    "status-limit-typo": ["status", PROD, "--limit", "gpu-9"],
    "bake-host-typo": ["cache", "bake", PROD, "--host", "gpu-9"],
    "bake-write-not-loaded": ["cache", "bake", PROD, "--host", "mi300x-a01", "--write", "{tmp}/other.yml"],
}


@pytest.mark.parametrize("case", CASES)
def test_a_refused_option_makes_no_connection(case, no_network, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv(rstate.RESULTS_ENV, str(tmp_path / "results"))
    (tmp_path / "other.yml").write_text("vllm_image_tag: old\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in CASES[case]]
    try:
        code = entry.main(argv)
    except SystemExit as exit_:  # argparse's own refusals
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and err.strip(), err
    assert no_network == [], no_network


def test_the_recorder_sees_a_command_that_does_connect(no_network, tmp_path, monkeypatch, capsys):
    # Control: valid options go on to SSH, and the recorder sees the lookup or the connect.
    monkeypatch.chdir(ROOT)
    code = entry.main(["status", PROD, "--limit", "mi300x-a01"])
    capsys.readouterr()
    assert code != 0 and no_network, no_network


def test_ctrl_c_while_the_modules_load_ends_with_one_line_and_130(monkeypatch, capsys):
    import builtins

    from rocmfleet import entry

    real = builtins.__import__

    def interrupted(name, *args, **kwargs):
        if name == "rocmfleet.cli":
            raise KeyboardInterrupt
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", interrupted)
    assert entry.main() == 130
    assert capsys.readouterr().err == "\nrocmfleet: interrupted while starting; nothing was done\n"


def test_init_writes_every_file_or_none(tmp_path, capsys):
    from rocmfleet.config import site

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "group_vars").write_text("")  # a file where a folder of the site goes
    assert entry.main(["init", str(tmp_path / "a")]) == 2
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["group_vars"]  # nothing half-written
    assert "a/group_vars" in capsys.readouterr().err
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "deploy.py").symlink_to(tmp_path / "outside.py")  # a link to nothing: not followed
    assert entry.main(["init", str(tmp_path / "b")]) == 2 and not (tmp_path / "outside.py").exists()
    assert entry.main(["init", ""]) == 2
    assert entry.main(["init", str(tmp_path / "c d")]) == 0
    written = sorted(str(p.relative_to(tmp_path / "c d")) for p in (tmp_path / "c d").rglob("*") if p.is_file())
    assert written == sorted(str(r) for r in site.skeleton_files())
    assert f"next: cd '{tmp_path / 'c d'}';" in capsys.readouterr().out


def test_init_removes_what_it_wrote_when_a_write_fails(tmp_path, monkeypatch):
    from rocmfleet.config import site

    real = site.shutil.copyfileobj
    calls = []

    def failing(src, dst):
        calls.append(dst)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(site.shutil, "copyfileobj", failing)
    with pytest.raises(OSError):
        site.init(tmp_path / "site")
    assert not (tmp_path / "site").exists()  # the folders it made went too


@pytest.mark.parametrize(
    ("line", "offered"),
    [("rocmfleet rol", {"rollout"}), ("rocmfleet rollout --ex", {"--exclude"}), ("rocmfleet cache ", {"bake"})],
)
def test_shell_completion_offers_commands_and_options(tmp_path, line, offered):
    """argcomplete's protocol, as bash's `complete` drives it (`register-python-argcomplete rocmfleet`)."""
    import os
    import subprocess
    import sys

    out = tmp_path / "completions"
    env = {**os.environ, "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
           "_ARGCOMPLETE_IFS": "\n", "_ARGCOMPLETE_STDOUT_FILENAME": str(out)}  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "rocmfleet.entry"], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert offered <= {word.strip() for word in out.read_text().split("\n")}, out.read_text()


def test_cache_bake_dry_shows_the_plan_and_without_a_terminal_needs_y(no_network, tmp_path, monkeypatch, capsys):
    from rocmfleet.fleet.cache import cachebake

    monkeypatch.setenv(rstate.RESULTS_ENV, str(tmp_path))
    monkeypatch.setattr(cachebake, "bake", lambda *a, **k: pytest.fail("baked"))
    assert entry.main(["cache", "bake", PROD, "--host", "mi300x-a01", "--dry"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("plan: bake on mi300x-a01: stop its instance llama-3.3-70b-0 (port 8000) meanwhile")
    assert ":v0.33.0-rfcache-<cache key>" in out and out.endswith("--dry: nothing was changed\n")
    assert entry.main(["cache", "bake", PROD, "--host", "mi300x-a01"]) == 2  # pytest's stdin is no terminal
    assert "not a terminal to ask on: pass -y" in capsys.readouterr().err
    assert no_network == []


def test_a_closed_standard_input_is_no_terminal_not_a_traceback(no_network, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(rstate.RESULTS_ENV, str(tmp_path))
    monkeypatch.setattr("sys.stdin", None)  # `rocmfleet ... <&-`
    assert entry.main(["cache", "bake", PROD, "--host", "mi300x-a01"]) == 2
    assert "not a terminal to ask on: pass -y" in capsys.readouterr().err
    assert entry.main(["vault", "encrypt-string", "HF_TOKEN"]) == 2
    assert "standard input is closed" in capsys.readouterr().err


def test_limit_and_exclude_items_are_trimmed_and_all_is_every_host():
    from rocmfleet.cli.common import limit_list
    from rocmfleet.fleet.inventory import load_fleet

    assert limit_list(["mi300x-a01, mi300x-a02", " "]) == ["mi300x-a01", "mi300x-a02"]
    assert [t.name for t in load_fleet(PROD, ["all"], exclude=["mi300x-a02"])] == ["mi300x-a01", "mi300x-a03"]


def test_an_empty_report_path_is_refused(no_network, capsys):
    for option in ("--json", "--junit-xml"):
        assert entry.main(["check", PROD, option, ""]) == 2
        assert f"{option} '': give a file, or - for standard output" in capsys.readouterr().err


def test_restart_soak_is_refused_saying_why(no_network, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv(rstate.RESULTS_ENV, str(tmp_path / "results"))
    assert entry.main(["restart", PROD, "--soak", "5m"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rocmfleet: --soak with restart: a soak compares a new image with the old one; ")
    assert "unrecognized arguments" not in err and no_network == []
    assert not (tmp_path / "results").exists()  # refused before any state


@pytest.mark.parametrize(("group", "choices"), [("metrics", "{targets}"), ("cache", "{bake}"),
                                                ("vault", "{encrypt-string,rekey}")])  # fmt: skip
def test_a_command_group_without_its_command_names_the_choices(group, choices, capsys):
    with pytest.raises(SystemExit) as exit_:
        entry.main([group])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert f"the following arguments are required: {choices}" in err and "_command" not in err, err
