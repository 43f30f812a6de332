"""rocmfleet.plan.swap and rocmfleet.domain.lastgood: the argument check, the last good copies,
wait and roll back.

The shell is run for real (``sh``) in a temporary directory, with stand-ins for ``curl``,
``docker``, ``systemctl``, ``journalctl`` and ``install`` (without ``-o``/``-g``) on ``PATH``.
The parser probe is run with the real Python against stand-in ``vllm`` packages laid out as
vLLM 0.32 and as older releases lay out their serve parser.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from pyinfra.api import FunctionCommand

from rocmfleet import scripts
from rocmfleet.domain import lastgood, readiness, vllm, vllmplace
from rocmfleet.domain.readiness import ReadyProbe
from rocmfleet.fleet.rollout import hoststeps
from rocmfleet.plan import swap
from rocmfleet.plan.instance import vllm_settings
from tests.unit.conftest import TOPOLOGY

IMAGE = "reg:5000/vllm:new@sha256:" + "ab" * 32
OLD_IMAGE = "reg:5000/vllm:old@sha256:" + "cd" * 32


# --- serve record and the check command --------------------------------------------------------


def test_serve_record_is_one_sorted_json_line():
    record = lastgood.serve_record(IMAGE, ["/m", "--port", "8000"], {"B": "2", "A": "1"})
    assert record == (
        '{"env": {"A": "1", "B": "2"}, "image": "' + IMAGE + '", "serve_args": ["/m", "--port", "8000"]}\n'
    )
    assert record == lastgood.serve_record(IMAGE, ("/m", "--port", "8000"), {"A": "1", "B": "2"})


def test_check_runs_a_throwaway_container_without_devices_network_or_pull():
    argv = swap.serve_args_check_argv(IMAGE, ["/m", "--port", "8000"], {"Z": "1", "A": "x y"}, "a")
    image_at = argv.index(IMAGE)
    assert argv[:image_at] == [
        "docker", "run", "--rm", "--network=none", "--pull=never",
        "--label", "org.rocmfleet.check=a",
        "--entrypoint", "python3",
        "--env", "A=x y", "--env", "Z=1",
    ]  # fmt: skip
    assert argv[image_at + 1 :] == ["-c", swap.PARSER_PROBE, '["/m", "--port", "8000"]']
    assert not any(a.startswith("--device") for a in argv)


def test_check_script_fails_saying_nothing_was_swapped():
    script = swap.serve_args_check_script(IMAGE, ["/m"], {}, "a")
    assert script.endswith(
        f"|| {{ echo 'vLLM in {IMAGE} rejects the new vllm serve arguments of instance a; nothing was swapped' >&2;"
        " exit 1; }"
    )


# --- the parser probe, against stand-in vllm packages -------------------------------------------

#: A FlexibleArgumentParser and a make_arg_parser like vLLM's (argparse underneath), with
#: ``--dtype`` choices and the --enable-auto-tool-choice rule of validate_parsed_serve_args.
CLI_ARGS = """
import argparse
def make_arg_parser(parser):
    {model_tag}
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--dtype", choices=["auto", "bfloat16"], default="auto")
    parser.add_argument("--enable-auto-tool-choice", action="store_true")
    parser.add_argument("--tool-call-parser")
    return parser
def validate_parsed_serve_args(args):
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        raise TypeError("Error: --enable-auto-tool-choice requires --tool-call-parser")
"""
MODEL_TAG = 'parser.add_argument("model_tag", nargs="?")'


def fake_vllm(root: Path, layout: str) -> Path:
    """A ``vllm`` package as vLLM 0.32 (``launchers``), 0.9 (``openai``, parser class in
    ``vllm.utils``, ``model_tag`` added by the serve subcommand) or with neither (``none``)."""
    pkg = root / layout / "vllm"
    for sub in ("entrypoints/launchers", "entrypoints/openai", "utils"):
        (pkg / sub).mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text('__version__ = "9.9.9"\n')
    (pkg / "entrypoints/__init__.py").write_text("")
    (pkg / "entrypoints/launchers/__init__.py").write_text("")
    (pkg / "entrypoints/openai/__init__.py").write_text("")
    parser_class = "import argparse\nclass FlexibleArgumentParser(argparse.ArgumentParser):\n    pass\n"
    if layout == "launchers":
        (pkg / "utils/__init__.py").write_text("")
        (pkg / "utils/argparse_utils.py").write_text(parser_class)
        (pkg / "entrypoints/launchers/cli_args.py").write_text(CLI_ARGS.format(model_tag=MODEL_TAG))
    elif layout == "openai":
        (pkg / "utils/__init__.py").write_text(parser_class)
        (pkg / "entrypoints/openai/cli_args.py").write_text(CLI_ARGS.format(model_tag="pass"))
    return pkg.parent


def probe(tmp_path: Path, layout: str, argv: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(fake_vllm(tmp_path, layout))}
    return subprocess.run(
        [sys.executable, "-c", swap.PARSER_PROBE, json.dumps(argv)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


@pytest.mark.parametrize("layout", ["launchers", "openai"])
def test_probe_accepts_good_arguments_with_either_layout(tmp_path, layout):
    result = probe(tmp_path, layout, ["/opt/models/m", "--port", "8001", "--dtype", "bfloat16"])
    assert (result.returncode, result.stdout) == (0, "vllm serve (vLLM 9.9.9) accepts the arguments\n")


@pytest.mark.parametrize("layout", ["launchers", "openai"])
def test_probe_rejects_an_unknown_flag_with_argparses_line_and_no_usage(tmp_path, layout):
    result = probe(tmp_path, layout, ["/m", "--no-such-flag", "1"])
    assert result.returncode == 2
    assert result.stderr == "vllm serve: error: unrecognized arguments: --no-such-flag 1\n"


def test_probe_rejects_a_bad_choice(tmp_path):
    result = probe(tmp_path, "launchers", ["/m", "--dtype", "float77"])
    assert result.returncode == 2
    assert "argument --dtype: invalid choice: 'float77'" in result.stderr


def test_probe_runs_vllms_checks_after_parsing(tmp_path):
    result = probe(tmp_path, "openai", ["/m", "--enable-auto-tool-choice"])
    assert result.returncode == 1
    assert result.stderr == (
        "vllm serve (vLLM 9.9.9): TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser\n"
    )


def test_probe_without_a_known_parser_exits_3(tmp_path):
    result = probe(tmp_path, "none", ["/m"])
    assert result.returncode == swap.NO_PARSER_EXIT
    assert result.stderr.startswith("rocmfleet: no vllm serve argument parser in this image:")


# --- a host in a directory ----------------------------------------------------------------------

STUBS = {
    # Ready when $STATE/ready-<port> exists; /v1/models lists "tiny" (or what $STATE/models-<port>
    # holds); the completions answer what
    # $STATE/completions-<port> and $STATE/chat-<port> hold (JSON), when they exist.
    "curl": """
        for a in "$@"; do case $a in http://*) url=$a;; esac; done
        port=${url#http://127.0.0.1:}; port=${port%%/*}
        echo "$url" >> "$STATE/urls"
        [ -e "$STATE/ready-$port" ] || exit 7
        case $url in
            */v1/models) if [ -e "$STATE/models-$port" ]; then cat "$STATE/models-$port";
                         else printf '{"data":[{"id":"tiny"}]}'; fi;;
            */v1/completions) [ -e "$STATE/completions-$port" ] && cat "$STATE/completions-$port";;
            */v1/chat/completions) [ -e "$STATE/chat-$port" ] && cat "$STATE/chat-$port";;
        esac
        exit 0
    """,
    # A ready port is held by pid 4242, a process of every container (docker top).
    "ss": """
        for a in "$@"; do case $a in *:*) port=${a##*:};; esac; done
        [ -e "$STATE/ready-$port" ] && echo "LISTEN 0 4096 0.0.0.0:$port 0.0.0.0:* users:((\\"vllm\\",pid=4242,fd=3))"
        exit 0
    """,
    # exec -i CONTAINER python3 ...: the probe's JSON check, run by this machine's python3.
    "docker": """
        [ "$1" = top ] && { printf 'PID\\n4242\\n'; exit 0; }
        [ "$1" = exec ] && { shift 3; exec "$@"; }
        echo "docker $*" >> "$STATE/calls"; [ "$1" = logs ] && echo "log line of ${4}"; exit 0
    """,
    "journalctl": 'echo "journal of $*"',
    # restart U: U comes back ready when $STATE/heals-U holds its port.
    "systemctl": """
        if [ "$1" = is-failed ]; then [ -e "$STATE/failed-$3" ]; exit; fi
        echo "systemctl $*" >> "$STATE/calls"
        if [ "$1" = restart ] && [ -e "$STATE/heals-$2" ]; then touch "$STATE/ready-$(cat "$STATE/heals-$2")"; fi
        exit 0
    """,
    # install without -o/-g (the tests need not run as root)
    "install": """
        args=""; skip=0
        for a in "$@"; do
            if [ $skip = 1 ]; then skip=0; continue; fi
            case $a in -o|-g) skip=1;; *) args="$args $a";; esac
        done
        exec /usr/bin/install $args
    """,
}


@pytest.fixture
def host(tmp_path):
    """``run(script)``: the script under ``sh`` with the stand-ins first on PATH; ``state``: their folder."""
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    for name, body in STUBS.items():
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
        path.chmod(0o755)

    def run(script: str | swap.WaitCommand) -> subprocess.CompletedProcess:
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STATE": str(state)}
        stdin = ""
        if isinstance(script, swap.WaitCommand):  # the command, its targets on stdin
            script, stdin = script.command, script.stdin
        return subprocess.run(
            ["sh", "-c", script], input=stdin, capture_output=True, text=True, env=env, check=False, timeout=60
        )

    run.state = state
    return run


def instance_files(tmp_path: Path, name: str) -> lastgood.LastGoodFiles:
    etc = tmp_path / "etc"
    (etc / "systemd").mkdir(parents=True, exist_ok=True)
    return lastgood.last_good_files(
        str(etc),
        name,
        str(etc / "systemd" / f"vllm-{name}.service"),
        str(etc / f"{name}.env"),
        str(etc / f"{name}.secrets"),
    )


def write_live(files: lastgood.LastGoodFiles, version: str) -> None:
    for name, path in files.live.items():
        Path(path).write_text(f"{name} of {version}\n")


def live_text(files: lastgood.LastGoodFiles) -> dict[str, str]:
    return {name: Path(path).read_text() for name, path in files.live.items()}


def last_good_state(host, files) -> lastgood.LastGoodState:
    result = host(lastgood.last_good_state_command(files))
    assert result.returncode == 0, result.stderr
    return lastgood.parse_last_good_state(result.stdout.splitlines())


def test_state_of_an_instance_never_saved_is_incomplete(host, tmp_path):
    files = instance_files(tmp_path, "a")
    write_live(files, "v1")
    state = last_good_state(host, files)
    assert state.files == {"unit": "missing", "env": "missing", "secrets": "missing"}
    assert (state.serve, state.complete, state.same, state.image) == (None, False, False, None)


def test_save_then_state_is_same_and_names_the_image(host, tmp_path):
    files = instance_files(tmp_path, "a")
    write_live(files, "v1")
    record = lastgood.serve_record(OLD_IMAGE, ["/m"], {"A": "1"})
    assert host(lastgood.save_last_good_script(files, record)).returncode == 0
    state = last_good_state(host, files)
    assert (state.complete, state.same, state.image) == (True, True, OLD_IMAGE)
    assert state.serve == json.loads(record)
    assert Path(files.serve_json).read_text() == record
    assert stat.S_IMODE(os.stat(files.directory).st_mode) == 0o700
    for name in lastgood.SAVED_FILES:
        assert stat.S_IMODE(os.stat(files.saved(name)).st_mode) == 0o600
        assert Path(files.saved(name)).read_text() == f"{name} of v1\n"


def test_a_new_env_file_makes_the_state_differ(host, tmp_path):
    files = instance_files(tmp_path, "a")
    write_live(files, "v1")
    host(lastgood.save_last_good_script(files, lastgood.serve_record(OLD_IMAGE, ["/m"], {})))
    Path(files.live["env"]).write_text("env of v2\n")
    state = last_good_state(host, files)
    assert state.files == {"unit": "same", "env": "differs", "secrets": "same"}
    assert (state.complete, state.same) == (True, False)


def test_parse_ignores_noise_and_bad_json():
    state = lastgood.parse_last_good_state(["unit same", "env differs", "secrets same", "serve {not json", "junk"])
    assert state.files == {"unit": "same", "env": "differs", "secrets": "same"}
    assert (state.serve, state.complete) == (None, False)


# --- wait, and roll back what is not ready -------------------------------------------------------


def target(files: lastgood.LastGoodFiles, name: str, port: int, roll_back_to: str | None) -> swap.WaitTarget:
    return swap.WaitTarget(
        name=name,
        unit=f"vllm-{name}.service",
        container=f"vllm-{name}",
        port=port,
        model="tiny",
        image=IMAGE,
        files=files,
        roll_back_to=roll_back_to,
    )


def calls(host) -> list[str]:
    path = host.state / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_all_ready_exits_0_and_touches_nothing(host, tmp_path):
    (host.state / "ready-8000").touch()
    (host.state / "ready-8001").touch()
    a, b = instance_files(tmp_path, "a"), instance_files(tmp_path, "b")
    script = swap.wait_or_roll_back_script([target(a, "a", 8000, None), target(b, "b", 8001, None)], 5, 5, 1)
    result = host(script)
    assert (result.returncode, result.stderr, calls(host)) == (0, "", [])


def test_the_instance_not_ready_is_rolled_back_and_the_host_fails(host, tmp_path):
    a, b = instance_files(tmp_path, "a"), instance_files(tmp_path, "b")
    for files in (a, b):
        write_live(files, "v1")
        host(lastgood.save_last_good_script(files, lastgood.serve_record(OLD_IMAGE, ["/m"], {})))
        write_live(files, "v2")
    (host.state / "ready-8001").touch()  # b's new version is ready; a's is not
    (host.state / "heals-vllm-a.service").write_text("8000")  # a's old version comes back
    script = swap.wait_or_roll_back_script([target(a, "a", 8000, OLD_IMAGE), target(b, "b", 8001, OLD_IMAGE)], 1, 5, 1)
    result = host(script)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"vLLM instance a (vllm-a.service, port 8000, image {IMAGE}) not ready after 1 s;"
        " last 40 log lines of its container:",
        "log line of vllm-a",
        "the readiness probe said:",
        "port 8000: free (not container vllm-a)",
        f"vllm-a.service: restoring its last good unit and environment (image {OLD_IMAGE})",
        f"vllm-a.service rolled back to image {OLD_IMAGE}: ready again",
    ]
    assert live_text(a) == {"unit": "unit of v1\n", "env": "env of v1\n", "secrets": "secrets of v1\n"}
    assert live_text(b) == {"unit": "unit of v2\n", "env": "env of v2\n", "secrets": "secrets of v2\n"}
    assert calls(host) == [
        "docker logs --tail 40 vllm-a",
        "systemctl daemon-reload",
        "systemctl reset-failed vllm-a.service",
        "systemctl restart vllm-a.service",
    ]


def test_the_rollback_puts_the_copies_back_with_the_live_modes(host, tmp_path):
    files = instance_files(tmp_path, "a")
    write_live(files, "v1")
    host(lastgood.save_last_good_script(files, lastgood.serve_record(OLD_IMAGE, ["/m"], {})))
    write_live(files, "v2")
    for path in files.live.values():
        os.chmod(path, 0o666)
    result = host(swap.wait_or_roll_back_script([target(files, "a", 8000, OLD_IMAGE)], 1, 1, 1))
    assert result.returncode == 1
    assert live_text(files) == {"unit": "unit of v1\n", "env": "env of v1\n", "secrets": "secrets of v1\n"}
    modes = {name: stat.S_IMODE(os.stat(path).st_mode) for name, path in files.live.items()}
    assert modes == {"unit": 0o644, "env": 0o600, "secrets": 0o600}


def test_without_a_version_to_roll_back_to_it_only_fails(host, tmp_path):
    a = instance_files(tmp_path, "a")
    write_live(a, "v2")
    result = host(swap.wait_or_roll_back_script([target(a, "a", 8000, None)], 1, 5, 1))
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == "vllm-a.service: no last good version to roll back to; left as it is"
    assert calls(host) == ["docker logs --tail 40 vllm-a"]
    assert live_text(a)["unit"] == "unit of v2\n"


def test_an_old_version_that_does_not_come_back_is_said_too(host, tmp_path):
    a = instance_files(tmp_path, "a")
    write_live(a, "v1")
    host(lastgood.save_last_good_script(a, lastgood.serve_record(OLD_IMAGE, ["/m"], {})))
    write_live(a, "v2")
    result = host(swap.wait_or_roll_back_script([target(a, "a", 8000, OLD_IMAGE)], 1, 1, 1))
    assert result.returncode == 1
    assert result.stderr.splitlines()[-4:] == [
        f"vllm-a.service rolled back to image {OLD_IMAGE}, but it is not ready after 1 s either; last log lines:",
        "log line of vllm-a",
        "the readiness probe said:",
        "port 8000: free (not container vllm-a)",
    ]


def test_a_failed_unit_is_not_waited_for_until_the_deadline(host, tmp_path):
    a = instance_files(tmp_path, "a")
    write_live(a, "v2")
    (host.state / "failed-vllm-a.service").touch()  # e.g. its GPUs are held: the unit does not retry
    started = time.monotonic()
    result = host(swap.wait_or_roll_back_script([target(a, "a", 8000, None)], 30, 5, 1))
    assert time.monotonic() - started < 10
    assert result.returncode == 1
    assert "vllm-a.service failed (see systemctl status vllm-a.service); not waiting for it any longer" in result.stderr


def test_logs_fall_back_to_the_journal_when_the_container_is_gone(host, tmp_path):
    (host.state.parent / "bin" / "docker").write_text("#!/bin/sh\necho 'Error: No such container' >&2\nexit 1\n")
    a = instance_files(tmp_path, "a")
    result = host(swap.wait_or_roll_back_script([target(a, "a", 8000, None)], 1, 1, 1))
    assert "journal of --no-pager -o cat -n 40 -u vllm-a.service" in result.stderr.splitlines()


# --- the known-answer request (ready_probe) ---------------------------------------------------

PARIS = ReadyProbe(prompt="The capital of France is", expect_regex=r'Paris "é"', max_tokens=4, chat=True)


def answer(text: str, chat: bool = False, ensure_ascii: bool = True) -> str:
    choice = {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
    return json.dumps({"choices": [choice]}, ensure_ascii=ensure_ascii)


@pytest.fixture(params=["in the container", "by rocmfleet check"])
def ready(request, host):
    """``ready(model, ready_probe)``: the probe's exit status and stderr, judged as ``vllm-probe.sh
    ready`` judges (the container's python3, here this machine's) or as ``rocmfleet check`` does
    (``vllm-probe.sh answers``, then :func:`readiness.judge` in this process): the same outcomes."""

    def run(model: str = "tiny", ready_probe: ReadyProbe | None = PARIS) -> subprocess.CompletedProcess:
        if request.param == "in the container":
            return host(readiness.probe_script(8000, model, "vllm-a", ready_probe))
        asked = host(readiness.answers_script(8000, model, "vllm-a", ready_probe))
        if asked.returncode != 0:
            return asked
        status, reason = readiness.judge(asked.stdout.encode(), model, ready_probe)
        return subprocess.CompletedProcess(asked.args, status, "", reason + "\n" if reason else "")

    return run


def test_the_known_answer_is_read_as_json_escaped_or_raw(host, ready):
    (host.state / "ready-8000").touch()
    for ensure_ascii in (True, False):  # "\u00e9" and "\"" escapes, or raw UTF-8
        (host.state / "completions-8000").write_text(answer(' Paris "é"\n', ensure_ascii=ensure_ascii))
        (host.state / "chat-8000").write_text(answer('Paris "é".', chat=True, ensure_ascii=ensure_ascii))
        result = ready()
        assert (result.returncode, result.stderr) == (0, "")


def test_a_wrong_answer_is_final_and_says_what_it_was(host, ready):
    (host.state / "ready-8000").touch()
    (host.state / "completions-8000").write_text(answer(" Berlin"))
    result = ready()
    assert result.returncode == 3
    assert result.stderr == 'vllm-probe: completion answered " Berlin", which does not match "Paris \\"\\u00e9\\""\n'


def test_a_chat_request_that_fails_is_not_ready_yet(host, ready):
    (host.state / "ready-8000").touch()
    (host.state / "completions-8000").write_text(answer(' Paris "é"'))
    # no chat answer: e.g. HTTP 400 without a chat template (vLLM issue 39279), curl -f prints nothing
    assert ready().returncode == 1
    assert ready(ready_probe=PARIS.model_copy(update={"chat": False})).returncode == 0


def test_a_wrong_answer_is_final_even_when_the_chat_request_then_fails(host, ready):
    (host.state / "ready-8000").touch()
    (host.state / "completions-8000").write_text(answer(" Berlin"))  # and no chat answer (curl -f fails)
    result = ready()
    assert result.returncode == 3
    assert 'vllm-probe: completion answered " Berlin"' in result.stderr


def test_a_completion_that_fails_is_not_ready_yet_without_a_known_answer(host, ready):
    (host.state / "ready-8000").touch()
    stub = host.state.parent / "bin" / "curl"
    stub.write_text(stub.read_text().replace("*/v1/completions) [", "*/v1/completions) exit 22; ["))
    assert ready(ready_probe=None).returncode == 1


def test_the_requests_are_greedy_and_escaped():
    args = readiness.probe_args("tiny-llama-é", PARIS)
    assert all(arg.isascii() for arg in args)
    model, body, expect, chat, chat_expect = (json.loads(a) for a in args)
    assert model == "tiny-llama-é" and expect == chat_expect == 'Paris "é"'
    assert body == {"model": "tiny-llama-é", "prompt": PARIS.prompt, "temperature": 0, "max_tokens": 4}
    assert chat["messages"] == [{"role": "user", "content": PARIS.prompt}] and chat["temperature"] == 0


def test_the_chat_answer_may_have_its_own_expectation(host, ready):
    (host.state / "ready-8000").touch()
    (host.state / "completions-8000").write_text(answer(' Paris "é"'))
    (host.state / "chat-8000").write_text(answer("It is Paris.", chat=True))
    result = ready()
    assert result.returncode == 3
    assert result.stderr == 'vllm-probe: chat answered "It is Paris.", which does not match "Paris \\"\\u00e9\\""\n'
    assert ready(ready_probe=PARIS.model_copy(update={"chat_expect_regex": "^It is Paris"})).returncode == 0


def test_a_non_ascii_served_name_is_listed_escaped_or_raw(host, ready):
    (host.state / "ready-8000").touch()
    for ensure_ascii in (True, False):
        listing = json.dumps({"data": [{"id": "tiny-llama-é"}]}, ensure_ascii=ensure_ascii)
        (host.state / "models-8000").write_text(listing)
        assert ready("tiny-llama-é", None).returncode == 0
    result = ready("tiny-llama-e", None)
    assert result.returncode == 1
    assert result.stderr == 'vllm-probe: /v1/models lists ["tiny-llama-\\u00e9"], not "tiny-llama-e"\n'


def test_answers_are_asked_without_a_docker_exec_and_judged_here(host):
    """``rocmfleet check``'s way: the host only fetches; the answers come back NUL-separated."""
    (host.state / "ready-8000").touch()
    (host.state / "completions-8000").write_text(answer(' Paris "é"'))
    (host.state / "chat-8000").write_text(answer('Paris "é"', chat=True))
    docker = host.state.parent / "bin" / "docker"
    docker.write_text(docker.read_text().replace('[ "$1" = exec ] && {', '[ "$1" = exec ] && { exit 99;'))
    asked = host(readiness.answers_script(8000, "tiny", "vllm-a", PARIS))
    assert (asked.returncode, asked.stderr) == (0, "")
    models, completion, chat = asked.stdout.split("\0")
    assert json.loads(models) == {"data": [{"id": "tiny"}]} and json.loads(completion) == json.loads(
        answer(' Paris "é"')
    )
    assert readiness.judge(asked.stdout.encode(), "tiny", PARIS) == (0, "")
    assert host(readiness.probe_script(8000, "tiny", "vllm-a", PARIS)).returncode == 1  # docker exec 99: not yet


def test_answers_from_a_port_held_by_another_process_are_not_asked(host):
    (host.state / "ready-8000").touch()
    (host.state.parent / "bin" / "docker").write_text("#!/bin/sh\nprintf 'PID\\n99\\n'\n")  # not pid 4242
    asked = host(readiness.answers_script(8000, "tiny", "vllm-a", PARIS))
    assert asked.returncode == 1 and asked.stdout == ""
    assert "not container vllm-a" in asked.stderr
    assert not (host.state / "urls").exists()  # not one request


@pytest.mark.parametrize(
    ("answers", "status", "reason"),
    [
        (b"", 1, "vllm-probe: models: no JSON answer"),
        (b'{"data": [{"id": "tiny"}]}', 1, "vllm-probe: completion: no JSON answer"),  # cut short
        (b'{"data": [{"id": "tiny"}]}\0{"choices": []}\0', 1, "vllm-probe: completion: unexpected answer"),
        (
            b'{"data": [{"id": "tiny"}]}\0{"choices": [{"text": " Paris \\"\xc3\xa9\\""}]}\0<html>',
            1,
            "vllm-probe: chat: no JSON answer",
        ),
        (b'{"data": {"id": "tiny"}}', 1, "vllm-probe: models: unexpected answer"),
        (b'{"object": "error"}\0\0', 1, "vllm-probe: models: unexpected answer"),
    ],
)
def test_the_judge_here_calls_empty_cut_short_or_foreign_answers_not_ready(answers, status, reason):
    found = readiness.judge(answers, "tiny", PARIS)
    assert found[0] == status and found[1].startswith(reason), found


def test_a_regular_expression_that_does_not_compile_here_is_a_wrong_answer():
    bad = PARIS.model_construct(**{**PARIS.model_dump(), "expect_regex": "(", "chat": False})
    answers = b'{"data": [{"id": "tiny"}]}\0{"choices": [{"text": "x"}]}\0'
    status, reason = readiness.judge(answers, "tiny", bad)
    assert status == 3 and "does not compile in rocmfleet check" in reason


def test_an_answer_nested_too_deep_to_parse_is_not_ready_here_as_in_the_container():
    assert readiness.judge(b"[" * 100000, "tiny", PARIS) == (1, "vllm-probe: models: no JSON answer")


def live(host) -> subprocess.CompletedProcess:
    return host(scripts.command("vllm-probe.sh", *readiness.live_args(8000, "vllm-a")))


def test_live_asks_the_port_and_health_but_makes_the_model_generate_nothing(host):
    (host.state / "ready-8000").touch()
    (host.state / "completions-8000").write_text(answer(" Berlin"))  # a wrong answer: not asked
    result = live(host)
    assert (result.returncode, result.stderr) == (0, "")
    assert (host.state / "urls").read_text().split() == ["http://127.0.0.1:8000/health"]


def test_live_is_not_serving_on_a_silent_port_or_one_held_by_another_process(host):
    assert live(host).returncode == 1  # nothing listens
    (host.state / "ready-8000").touch()
    (host.state.parent / "bin" / "docker").write_text("#!/bin/sh\nprintf 'PID\\n99\\n'\n")  # not pid 4242
    result = live(host)
    assert result.returncode == 1
    assert "not container vllm-a" in result.stderr


def test_a_wrong_answer_rolls_back_at_once_and_the_old_version_is_not_asked_it(host, tmp_path):
    a = instance_files(tmp_path, "a")
    write_live(a, "v1")
    host(lastgood.save_last_good_script(a, lastgood.serve_record(OLD_IMAGE, ["/m"], {})))
    write_live(a, "v2")
    (host.state / "ready-8000").touch()
    (host.state / "completions-8000").write_text(answer(" Berlin"))  # the old version answers the same
    wrong = swap.WaitTarget(**{**target(a, "a", 8000, OLD_IMAGE).__dict__, "ready_probe": PARIS})
    started = time.monotonic()
    result = host(swap.wait_or_roll_back_script([wrong], 60, 5, 1))
    assert time.monotonic() - started < 20  # not the 60 s deadline
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0] == "vllm-a.service answered the known-answer request wrongly; not waiting for it any longer"
    assert 'vllm-probe: completion answered " Berlin", which does not match "Paris \\"\\u00e9\\""' in lines
    assert lines[-1] == f"vllm-a.service rolled back to image {OLD_IMAGE}: ready again"
    assert live_text(a)["unit"] == "unit of v1\n"


# --- the operations' decisions (pyinfra's host replaced by a stand-in with canned facts) ---------
# (those needing no host data or files are JSON cases: tests/operations/vllm.*/)


class FakeHost:
    """``get_fact`` answers from ``ready`` ({port: bool}), ``saved`` ({directory: LastGoodState}) and
    ``facts`` (fact class -> answer: the topology, device gids, managed instances, port owners)."""

    name = "gpu-1"

    def __init__(self, ready: dict[int, bool], saved: dict[str, lastgood.LastGoodState], **facts) -> None:
        self.ready, self.saved, self.noops = ready, saved, []
        self.facts = {"GpuTopology": TOPOLOGY, "DeviceGroupIds": [44, 992], **facts}

    def get_fact(self, fact, **kwargs):
        from rocmfleet.facts.rollout import LastGood
        from rocmfleet.facts.vllm import PortOwner, VllmReady

        if fact is VllmReady:
            return self.ready[kwargs["port"]]
        if fact is PortOwner:
            return self.facts["PortOwner"][kwargs["port"]]
        if fact is LastGood:
            return self.saved[kwargs["files"].directory]
        return self.facts[fact.__name__]

    def noop(self, message: str) -> None:
        self.noops.append(message)


def saved_state(files: str, serve: dict | None) -> lastgood.LastGoodState:
    return lastgood.LastGoodState(files=dict.fromkeys(lastgood.SAVED_FILES, files), serve=serve)


@pytest.fixture
def ops(monkeypatch):
    from rocmfleet.operations import vllm as vllm_ops

    def use(fake: FakeHost, executing: bool = True):
        monkeypatch.setattr(vllm_ops, "host", fake)
        monkeypatch.setattr(vllm_ops, "state", type("State", (), {"is_executing": executing})())
        return vllm_ops

    return use


def commands(generator) -> list[str]:
    return [str(command) for command in generator]


def expected_env(config, name: str) -> dict[str, str]:
    return vllm.container_env(vllm_settings(config), vllmplace.placements(vllm_settings(config), TOPOLOGY)[name])


def failure(commands_: list) -> str:
    """The message of the one host failure an operation yielded."""
    (command,) = commands_
    assert isinstance(command, FunctionCommand)
    return command.args[0]


def test_check_is_a_noop_when_the_last_good_version_ran_the_same(ops, tmp_path, lab_config):
    files = instance_files(tmp_path, "tiny-llama-a")
    inst = lab_config.instances()[0]
    args, env = vllm.serve_args(vllm_settings(lab_config), inst), expected_env(lab_config, inst.name)
    record = json.loads(lastgood.serve_record(lab_config.image.reference, args, env))
    fake = FakeHost({}, {files.directory: saved_state("same", record)})
    vllm_ops = ops(fake)
    assert list(vllm_ops.serve_args_check._inner(lab_config, inst.name, files)) == []
    assert fake.noops == ["tiny-llama-a: its last good version ran these vllm serve arguments on this image"]
    # a last good version on another image: checked with the instance's placed environment
    fake = FakeHost({}, {files.directory: saved_state("same", {**record, "image": OLD_IMAGE})})
    checked = commands(ops(fake).serve_args_check._inner(lab_config, inst.name, files))
    assert checked == [swap.serve_args_check_script(lab_config.image.reference, args, env, inst.name)]
    assert "CUDA_VISIBLE_DEVICES=0" in checked[0]


def test_nothing_is_placed_while_preparing_a_host_without_gpus(ops, tmp_path, lab_config):
    fake = FakeHost({}, {}, GpuTopology=None)
    vllm_ops = ops(fake, executing=False)
    files = instance_files(tmp_path, "tiny-llama-a")
    assert commands(vllm_ops.place._inner(lab_config)) == []
    assert commands(vllm_ops.instance_files._inner(lab_config, "tiny-llama-a")) == []
    assert commands(vllm_ops.serve_args_check._inner(lab_config, "tiny-llama-a", files)) == []
    assert commands(vllm_ops.last_good._inner(lab_config, "tiny-llama-a", files)) == []
    assert fake.noops[0] == "the GPU topology is read after the driver is installed and the host rebooted"


def test_a_host_without_gpus_at_execution_fails_alone_with_the_reason(ops, lab_config):
    vllm_ops = ops(FakeHost({}, {}, GpuTopology=None))
    assert failure(list(vllm_ops.place._inner(lab_config))) == f"rocmfleet: {vllm_ops.NO_KFD}"


def test_instances_that_do_not_fit_fail_the_host_with_the_placement_problem(ops, lab_data):
    from rocmfleet.config.settings import host_config

    # valid for a 16-GPU host (vllm_gpu_count); the topology has 8
    config = host_config(
        {**lab_data, "vllm_gpu_count": 16, "vllm_instances": [{"name": "x", "port": 8000, "gpus": [9]}]}
    )
    message = failure(list(ops(FakeHost({}, {})).place._inner(config)))
    assert (
        message.startswith("rocmfleet: placement: ") and "the host shows 8 GPU(s) and vllm_gpu_count says 16" in message
    )


def test_placement_is_said_and_read_once_per_run(ops, lab_config):
    fake = FakeHost({}, {})
    vllm_ops = ops(fake)
    placed = vllm_ops.Placed(lab_config)  # the role's, one per host and run
    assert list(vllm_ops.place._inner(lab_config, placed)) == []
    fake.facts["GpuTopology"] = None  # read again, this would fail the host
    assert list(vllm_ops.place._inner(lab_config, placed)) == []
    assert fake.noops[0].startswith("tiny-llama-a: ") and "tiny-llama-b: " in fake.noops[0]


def test_wait_rolls_back_only_what_is_not_ready_and_has_a_different_last_good(ops, tmp_path):
    a, b, c = (instance_files(tmp_path, n) for n in "abc")
    old = {"image": OLD_IMAGE, "serve_args": [], "env": {}}
    fake = FakeHost(
        {8000: False, 8001: False, 8002: True},
        {
            a.directory: saved_state("differs", old),
            b.directory: saved_state("same", old),
            c.directory: saved_state("same", old),
        },
    )
    targets = [target(a, "a", 8000, None), target(b, "b", 8001, None), target(c, "c", 8002, None)]
    (command,) = ops(fake).ready_or_roll_back._inner(targets, 10, 20)
    # a: new files, a complete last good version -> restored; b: unchanged, nothing to go back to; c: ready
    expected = swap.wait_or_roll_back_script([target(a, "a", 8000, OLD_IMAGE), target(b, "b", 8001, None)], 10, 20)
    assert str(command) == expected.command
    assert command.connector_arguments == {"_stdin": expected.stdin}  # pyinfra sends the targets on stdin


def test_wait_is_a_noop_when_everything_is_ready(ops, tmp_path):
    a = instance_files(tmp_path, "a")
    fake = FakeHost({8000: True}, {})
    assert commands(ops(fake).ready_or_roll_back._inner([target(a, "a", 8000, None)], 10, 20)) == []
    assert fake.noops == ["vLLM instances a are ready"]


def test_last_good_is_kept_once_and_only_when_ready(ops, tmp_path, lab_config):
    inst = lab_config.instances()[0]
    files = instance_files(tmp_path, inst.name)
    env = expected_env(lab_config, inst.name)
    record = lastgood.serve_record(lab_config.image.reference, vllm.serve_args(vllm_settings(lab_config), inst), env)
    unsaved = FakeHost({8000: True}, {files.directory: saved_state("missing", None)})
    assert commands(ops(unsaved).last_good._inner(lab_config, inst.name, files)) == [
        lastgood.save_last_good_script(files, record)
    ]
    saved = FakeHost({8000: True}, {files.directory: saved_state("same", json.loads(record))})
    assert commands(ops(saved).last_good._inner(lab_config, inst.name, files)) == []
    not_ready = FakeHost({8000: False}, {files.directory: saved_state("differs", None)})
    message = failure(list(ops(not_ready).last_good._inner(lab_config, inst.name, files)))
    assert message == "rocmfleet: tiny-llama-a: not ready on port 8000; its files are not kept as the last good version"


def test_a_baked_image_runs_only_where_its_cache_key_matches(ops, lab_data):
    from tests.unit.test_cache import _baked, _key

    config, labels = _baked(lab_data, _key(lab_data))  # baked for gfx942, the fake host's GPUs
    assert list(ops(FakeHost({}, {}, ImageLabels=labels)).baked_cache_matches._inner(config)) == []
    other, other_labels = _baked(lab_data, _key(lab_data, arch="gfx90a"))
    message = failure(list(ops(FakeHost({}, {}, ImageLabels=other_labels)).baked_cache_matches._inner(other)))
    assert message.startswith("rocmfleet: baked image ") and "field gpu_arch is 'gfx90a' in the image" in message


def test_a_warm_up_runs_once_the_probe_passes_and_gates_readiness(host, tmp_path):
    (host.state / "ready-8000").touch()
    a = instance_files(tmp_path, "a")
    warm = swap.WaitTarget(**{**target(a, "a", 8000, None).__dict__, "warmup": "echo warmed >> $STATE/calls; false"})
    result = host(swap.wait_or_roll_back_script([warm], 2, 2, 1))
    assert result.returncode == 1  # ready by the probe, but the warm-up failed: not ready
    assert "warmed" in calls(host)


@pytest.mark.parametrize("count, warm", [(64, False), (32, True), (64, True)])
def test_the_wait_command_stays_small_for_many_instances(tmp_path, lab_config, count, warm):
    # One argument of a command line is at most 128 KiB on Linux (MAX_ARG_STRLEN), and pyinfra sends
    # the whole command as one (`sh -c '...'`): the probe's and warm-up's texts travel once, not per
    # target (8 instances with a text per target made 137 KB and failed with E2BIG), and the targets
    # travel on stdin (64 instances with a warm-up each made about 180 KB of arguments).
    from rocmfleet import scripts
    from rocmfleet.domain import warmup

    profile = lab_config.profile.model_copy(update={"max_num_seqs": None})  # vLLM's 256: 52 warm-up steps

    def targets(n: int) -> list[swap.WaitTarget]:
        files = instance_files(tmp_path, "a")
        base = target(files, "a", 8000, OLD_IMAGE).__dict__
        return [
            swap.WaitTarget(
                **{
                    **base,
                    "name": f"i{i}",
                    "port": 8000 + i,
                    "warmup": scripts.in_wait("vllm-warmup.sh", *warmup.args(profile, 8000 + i)) if warm else None,
                    "ready_probe": PARIS,
                }
            )
            for i in range(n)
        ]

    wait = swap.wait_or_roll_back_script(targets(count), 1800, 1800)
    one = swap.wait_or_roll_back_script(targets(1), 1800, 1800)
    assert len(shlex.quote(wait.command).encode()) < 128 * 1024 - 4096
    # the command does not grow with the instances: only the count at its end differs
    assert wait.command.removesuffix(f" {count}") == one.command.removesuffix(" 1")
    assert len(wait.stdin.splitlines()) >= count and wait.stdin.count("\ntarget ") == count - 1
    marker = next(line for line in scripts.text("vllm-probe.sh").splitlines() if len(line) > 40 and "'" not in line)
    assert wait.command.count(marker) == 1  # the probe's text once, not per target
    if count == 64 and warm:
        assert len(wait.stdin.encode()) > 128 * 1024  # what the command would have carried before


def test_many_targets_with_warm_ups_are_all_waited_for_from_stdin(host, tmp_path, lab_config):
    from rocmfleet import scripts

    targets = []
    for i in range(64):
        (host.state / f"ready-{9000 + i}").touch()
        files = instance_files(tmp_path, f"i{i}")
        warm = f"echo warmed i{i} >> $STATE/calls; : {shlex.quote(scripts.text('vllm-warmup.sh'))}"  # of size
        base = target(files, f"i{i}", 9000 + i, None).__dict__
        targets.append(swap.WaitTarget(**{**base, "warmup": warm}))
    wait = swap.wait_or_roll_back_script(targets, 5, 5, 1)
    assert len(wait.stdin.encode()) > 128 * 1024
    result = host(wait)
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(calls(host)) == sorted(f"warmed i{i}" for i in range(64))


@pytest.mark.parametrize("cut", ["empty", "one line lost", "not a target"])
def test_a_stdin_with_fewer_targets_than_counted_fails_never_passes(host, tmp_path, cut):
    targets = [target(instance_files(tmp_path, name), name, port, None) for name, port in (("a", 8000), ("b", 8001))]
    for port in (8000, 8001):
        (host.state / f"ready-{port}").touch()
    wait = swap.wait_or_roll_back_script(targets, 1, 1, 1)
    first = wait.stdin.splitlines(keepends=True)[0]
    stdin = {"empty": "", "one line lost": first, "not a target": first + "tarjet a b\n"}[cut]
    result = host(swap.WaitCommand(wait.command, stdin))
    assert result.returncode == 2, result.stderr
    assert "target(s) on stdin, 2 expected" in result.stderr
    assert host(wait).returncode == 0  # the whole list: both ready


def test_a_target_line_with_a_missing_word_says_how_to_call_the_wait(host, tmp_path):
    wait = swap.wait_or_roll_back_script([target(instance_files(tmp_path, "a"), "a", 8000, None)], 1, 1, 1)
    broken = swap.WaitCommand(wait.command, wait.stdin.rsplit(" ", 1)[0] + "\n")
    result = host(broken)
    assert result.returncode == 2 and result.stderr.startswith("usage: vllm-wait.sh TIMEOUT_S")


# --- a rolling restart waits with the same wait ----------------------------------------------------


def restart_steps(host, lab_data, monkeypatch, **data):
    """hoststeps.HostSteps for one host whose commands run under ``host`` (the stand-ins)."""
    from rocmfleet.config.settings import host_config
    from rocmfleet.fleet.connect import Result

    config = host_config({**lab_data, **data})
    sent: list[tuple[str, str | None]] = []

    def run(self, name, command, timeout_s, gate, stdin=None):
        sent.append((command, stdin))
        done = host(swap.WaitCommand(command, stdin or ""))
        return Result(done.returncode, done.stdout.encode(), done.stderr.encode())

    monkeypatch.setattr(hoststeps.HostSteps, "_run", run)
    target = type("Target", (), {"config": config})()
    for instance in config.instances():  # every instance serves and gives the profile's known answers
        (host.state / f"ready-{instance.port}").touch()
        (host.state / f"models-{instance.port}").write_text('{"data":[{"id":"tiny-llama"}]}')
        (host.state / f"completions-{instance.port}").write_text(answer(" pole pole pole pole"))
        (host.state / f"chat-{instance.port}").write_text(answer(" back ribasese\ufffdrise", chat=True))
    return hoststeps.HostSteps("inv.py", {"gpu-1": target}, None, "r1"), config, sent


def test_a_rolling_restart_waits_with_the_deploys_wait_and_its_targets_on_stdin(host, lab_data, monkeypatch):

    steps, config, sent = restart_steps(host, lab_data, monkeypatch, vllm_ready_timeout_s=30)
    times = steps.switch("gpu-1", None)
    assert set(times) == {"restart", "readiness"}
    units = [f"vllm-{i.name}.service" for i in config.instances()]
    assert calls(host) == [f"systemctl reset-failed {' '.join(units)}", f"systemctl restart {' '.join(units)}"]
    wait = swap.wait_or_roll_back_script(swap.wait_targets(config), 30, 0, hoststeps.POLL_S)
    assert sent[1] == (wait.command, wait.stdin)  # the deploy's targets: known answer, warm-up


def test_a_rolling_restart_gives_up_at_once_on_a_failed_unit(host, lab_data, monkeypatch):
    from rocmfleet.fleet.rollout.steps import StepError

    steps, config, _sent = restart_steps(host, lab_data, monkeypatch, vllm_ready_timeout_s=50)
    first = config.instances()[0]
    (host.state / f"ready-{first.port}").unlink()
    (host.state / f"failed-vllm-{first.name}.service").touch()  # its container exits: start limit hit
    started = time.monotonic()
    with pytest.raises(StepError) as failed:
        steps.switch("gpu-1", None)
    assert time.monotonic() - started < 30  # not the 50 s deadline
    assert failed.value.gate == "readiness"
    assert f"vllm-{first.name}.service failed (see systemctl status" in str(failed.value)


# --- a rollback is waited for where the restored version serves ----------------------------------


def test_served_by_reads_the_port_and_name_as_vllm_does():
    assert lastgood.served_by(["/m", "--served-model-name", "tiny", "--port", "8001"]) == (8001, "tiny")
    assert lastgood.served_by(["/m", "--port=8002", "--port", "8003"]) == (8003, "/m")  # the last wins; the model
    assert lastgood.served_by(["/m", "--served-model-name", "a", "b", "--host", "0.0.0.0"]) == (8000, "a")
    assert lastgood.served_by(["/m", "--served-model-name=x"]) == (8000, "x")
    assert lastgood.served_by([]) == (8000, None)
    old = {"image": OLD_IMAGE, "serve_args": ["/m", "--served-model-name", "old", "--port", "8005"], "env": {}}
    assert saved_state("differs", old).served == (8005, "old")
    assert saved_state("differs", None).served == (None, None)


def test_the_restored_version_is_probed_on_its_own_port_and_served_name(host, tmp_path):
    a = instance_files(tmp_path, "a")
    write_live(a, "v1")
    host(lastgood.save_last_good_script(a, lastgood.serve_record(OLD_IMAGE, ["/m", "--port", "8005"], {})))
    write_live(a, "v2")
    (host.state / "heals-vllm-a.service").write_text("8005")  # the old version comes back on its port
    (host.state / "models-8005").write_text('{"data":[{"id":"old-tiny"}]}')
    moved = swap.WaitTarget(**{**target(a, "a", 8000, OLD_IMAGE).__dict__, "back_port": 8005, "back_model": "old-tiny"})
    result = host(swap.wait_or_roll_back_script([moved], 1, 5, 1))
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == f"vllm-a.service rolled back to image {OLD_IMAGE}: ready again"


def test_the_wait_takes_the_restored_versions_port_and_name_from_its_serve_json(ops, tmp_path):
    a, b = instance_files(tmp_path, "a"), instance_files(tmp_path, "b")
    moved = {"image": OLD_IMAGE, "serve_args": ["/m", "--served-model-name", "old", "--port", "8005"], "env": {}}
    same = {"image": OLD_IMAGE, "serve_args": ["/m", "--served-model-name", "tiny", "--port", "8001"], "env": {}}
    fake = FakeHost({8000: False, 8001: False}, {a.directory: saved_state("differs", moved),
                                                 b.directory: saved_state("differs", same)})  # fmt: skip
    (command,) = ops(fake).ready_or_roll_back._inner([target(a, "a", 8000, None), target(b, "b", 8001, None)], 10, 20)
    planned = [
        swap.WaitTarget(**{**target(a, "a", 8000, OLD_IMAGE).__dict__, "back_port": 8005, "back_model": "old"}),
        target(b, "b", 8001, OLD_IMAGE),  # serves where the new one does: probed as before
    ]
    assert command.connector_arguments["_stdin"] == swap.wait_or_roll_back_script(planned, 10, 20).stdin
