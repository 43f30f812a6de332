"""
Swapping a vLLM instance to a new version without leaving it broken: check, swap, wait, roll back.

An MI300X instance holds most of its GPUs' memory (profiles run ``--gpu-memory-utilization``
up to 0.92), so the new container cannot start beside the old one on the same GPUs: the swap
is in place. What protects the host is the order (``roles/vllm``):

1. pull the new image while the old container serves (``docker.image``);
2. check the new ``vllm serve`` arguments with the new image's own vLLM argument parser in a
   throw-away container (:func:`serve_args_check_script`); a rejection fails the host before any
   file of the instance is written;
3. write the unit and environment files and restart the unit;
4. wait until the new server is ready (:mod:`rocmfleet.domain.readiness`);
5. if it is not ready by the deadline (or answers the profile's known-answer request wrongly),
   restore the *last good* files, restart, wait for the old version to be ready again, and still
   fail the host, with the new container's last log lines and the image it rolled back to
   (:func:`wait_or_roll_back_script`, running ``rocmfleet/scripts/vllm-wait.sh``).

The last good version of an instance (its copies and ``serve.json``) is
:mod:`rocmfleet.domain.lastgood`'s. Step 2 is skipped when ``serve.json`` already
records the wanted image, arguments and environment: they were proven by a server that became
ready, so a converged host reports no change.

Everything here is a pure function returning text (shell run on the host, JSON); the pyinfra
operations are in :mod:`rocmfleet.operations.vllm`.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from rocmfleet import scripts
from rocmfleet.config.instances import Instance
from rocmfleet.config.profiles import Image, Profile
from rocmfleet.domain import vllmfiles, warmup
from rocmfleet.domain.lastgood import LastGoodFiles, last_good_files
from rocmfleet.domain.readiness import ReadyProbe, probe_args

#: Where the instances' systemd units are (``/etc/systemd/system/vllm-<instance>.service``).
SYSTEMD_DIR = "/etc/systemd/system"

#: How many lines of a failed container's log the deploy prints.
LOG_LINES = 40

#: Exit status of the parser check when the image has no vLLM serve parser we know.
NO_PARSER_EXIT = 3

#: Runs inside the new image (``python3 -c PROBE ARGV_JSON``): builds ``vllm serve``'s own argument
#: parser and checks, as the ``vllm`` command does before it starts anything
#: (``vllm/entrypoints/cli/serve.py``: ``make_arg_parser`` on a ``FlexibleArgumentParser``, then
#: ``validate_parsed_serve_args``). The module moved: ``vllm.entrypoints.launchers.cli_args`` in
#: vLLM 0.32 (the lab image), ``vllm.entrypoints.openai.cli_args`` from 0.5 to 0.1x; the parser
#: class moved from ``vllm.utils`` to ``vllm.utils.argparse_utils``. Older releases added the
#: positional ``model_tag`` in the serve subcommand rather than in ``make_arg_parser``, so it is
#: added when missing. argparse rejects with ``vllm serve: error: ...`` on stderr (its usage, hundreds of
#: lines, is left out) and exit status 2;
#: a failed check prints its exception and exits 1; no known parser exits 3.
PARSER_PROBE = """\
import json, sys
argv = json.loads(sys.argv[1])
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
except ImportError:
    try:
        from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
    except ImportError as exc:
        print(f"rocmfleet: no vllm serve argument parser in this image: {exc}", file=sys.stderr)
        sys.exit(3)
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
from vllm import __version__
parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
parser.print_usage = lambda file=None: None  # the usage is hundreds of lines; the error line says it
if not any(action.dest == "model_tag" for action in parser._actions):
    parser.add_argument("model_tag", nargs="?")
args = parser.parse_args(argv)
try:
    validate_parsed_serve_args(args)
except Exception as exc:
    print(f"vllm serve (vLLM {__version__}): {type(exc).__name__}: {exc}", file=sys.stderr)
    sys.exit(1)
print(f"vllm serve (vLLM {__version__}) accepts the arguments")
"""


def serve_args_check_argv(image: str, serve_args: Sequence[str], env: Mapping[str, str], instance: str) -> list[str]:
    """``docker run`` of :data:`PARSER_PROBE` in a throw-away container of ``image``.

    The container gets no devices, no network (``--network=none``), never pulls
    (``--pull=never``: the deploy pulled the image before) and is removed when it exits; the
    running instance is not touched. It gets the instance's environment without secrets, since
    vLLM reads its ``VLLM_*`` variables on import. ``python3`` is the entrypoint: the official
    images (``ENTRYPOINT ["vllm", "serve"]``, reference §3.1) and the lab image have vLLM's
    Python first on ``PATH``.

    Args:
        image: image reference (by digest).
        serve_args: the ``vllm serve`` arguments to check.
        env: container environment, ``{NAME: value}``, no secret values.
        instance: instance name, for the container's label ``org.rocmfleet.check``.
    """
    argv = ["docker", "run", "--rm", "--network=none", "--pull=never"]
    argv += ["--label", f"org.rocmfleet.check={instance}", "--entrypoint", "python3"]
    for name, value in sorted(env.items()):
        argv += ["--env", f"{name}={value}"]
    return [*argv, image, "-c", PARSER_PROBE, json.dumps(list(serve_args))]


def serve_args_check_script(image: str, serve_args: Sequence[str], env: Mapping[str, str], instance: str) -> str:
    """Shell that runs :func:`serve_args_check_argv` and exits 1, saying so, when vLLM rejects the arguments.

    vLLM's own message (argparse's ``error: ...`` or the failed check) is on stderr before ours.
    """
    said = f"vLLM in {image} rejects the new vllm serve arguments of instance {instance}; nothing was swapped"
    check = shlex.join(serve_args_check_argv(image, serve_args, env, instance))
    return f"{check} || {{ echo {shlex.quote(said)} >&2; exit 1; }}"


# ---------------------------------------------------------------------------------------------
# Waiting, and rolling back what is not ready


@dataclass(frozen=True)
class WaitTarget:
    """One instance the deploy waits for.

    Attributes:
        name: instance name.
        unit: ``vllm-<name>.service``.
        container: ``vllm-<name>``.
        port: API port on the host.
        model: served model name ``/v1/models`` must list.
        image: the image this deploy runs it on.
        files: its live and last good files.
        roll_back_to: the last good version's image when it can be restored (a complete last good
            version that differs from the live files), else ``None``: then a timeout only fails.
        warmup: shell that sends the profile's warm-up requests (:func:`rocmfleet.domain.warmup.args`
            through :func:`rocmfleet.scripts.in_wait`, ``warmup_at_start``); run once the probe
            passes, and the instance counts as ready only when it succeeded, so a cold instance
            never takes user traffic first.
        ready_probe: the profile's known-answer request (:class:`rocmfleet.domain.readiness.ReadyProbe`),
            or ``None``; the new version is ready only when its greedy answer matches.
        back_port, back_model: the port and served model name of the version ``roll_back_to``
            restores (its ``serve.json``: :attr:`rocmfleet.domain.lastgood.LastGoodState.served`), when they differ from
            ``port`` and ``model`` (a profile change rolled back with the image); ``None``: the same.
    """

    name: str
    unit: str
    container: str
    port: int
    model: str
    image: str
    files: LastGoodFiles
    roll_back_to: str | None = None
    warmup: str | None = None
    ready_probe: ReadyProbe | None = None
    back_port: int | None = None
    back_model: str | None = None


class Served(Protocol):
    """What :func:`wait_targets` reads of a host's validated configuration: its profile, image and
    instances (``rocmfleet.config.settings.HostConfig`` has them)."""

    @property
    def profile(self) -> Profile: ...
    @property
    def image(self) -> Image: ...
    def instances(self) -> list[Instance]: ...


def wait_targets(config: Served, image: str | None = None) -> list[WaitTarget]:
    """One :class:`WaitTarget` per instance of ``config`` (no ``roll_back_to``), for the deploy's
    wait (``roles/vllm``) and a rolling restart's (:mod:`rocmfleet.fleet.rollout.hoststeps`) alike: the profile's
    served name, known-answer request and, with ``warmup_at_start``, its warm-up.

    Args:
        config: the host's validated configuration (``HostConfig``).
        image: the image reference the instances run (default: ``config.image.reference``).
    """
    targets = []
    for instance in config.instances():
        names = vllmfiles.files_of(instance)
        unit_path = f"{SYSTEMD_DIR}/{names.unit}"
        warm = None
        if config.profile.warmup_at_start:
            warm = scripts.in_wait("vllm-warmup.sh", *warmup.args(config.profile, instance.port))
        targets.append(
            WaitTarget(
                name=instance.name,
                unit=names.unit,
                container=names.container,
                port=instance.port,
                model=config.profile.served_model_name,
                image=image or config.image.reference,
                files=last_good_files(
                    vllmfiles.CONFIG_DIR, instance.name, unit_path, names.env_file, names.secrets_file
                ),
                warmup=warm,
                ready_probe=config.profile.ready_probe,
            )
        )
    return targets


def _ready(target: WaitTarget, ready_probe: ReadyProbe | None) -> str:
    """Shell that exits 0 when ``target`` is ready: the probe, then its warm-up (once) if it has one."""
    probe = scripts.in_wait(
        "vllm-probe.sh", "ready", target.port, target.container, *probe_args(target.model, ready_probe)
    )
    return f"{probe} && {target.warmup}" if target.warmup else probe


def _back_ready(target: WaitTarget) -> str:
    """Shell that exits 0 when the version ``target`` rolls back to is ready: the probe without the
    new profile's known answer (see :func:`wait_or_roll_back_script`), then the warm-up; when that
    version serves another port or name (``back_port``, ``back_model``), the probe there and no
    warm-up (the warm-up's requests name the new port and served name)."""
    if target.back_port is None and target.back_model is None:
        return _ready(target, None)
    port = target.back_port or target.port
    model = target.back_model or target.model
    return scripts.in_wait("vllm-probe.sh", "ready", port, target.container, *probe_args(model, None))


@dataclass(frozen=True)
class WaitCommand:
    """What :func:`wait_or_roll_back_script` gives: shell to run on the host and what to send on its stdin.

    Attributes:
        command: ``sh -c '<vllm-wait.sh>' vllm-wait.sh TIMEOUT_S ... PROBE WARMUP COUNT``; its size does
            not grow with the number of instances.
        stdin: the targets, one ``target NAME UNIT ...`` line each (words shell-quoted); pyinfra
            sends it with ``StringCommand(command, _stdin=stdin)``, :mod:`rocmfleet.fleet.connect` with
            ``Session.run(command, stdin=stdin)``.
    """

    command: str
    stdin: str


def wait_or_roll_back_script(
    targets: Sequence[WaitTarget], timeout_s: int, rollback_timeout_s: int, interval_s: int = 5
) -> WaitCommand:
    """Shell that waits until every target is ready, and rolls back those that are not by the deadline.

    Runs ``rocmfleet/scripts/vllm-wait.sh`` (what it does, step by step, is in the script): poll
    every target's readiness (:func:`rocmfleet.domain.readiness.probe_script` with its ``ready_probe``,
    then its warm-up) until all are ready or ``timeout_s``; a unit systemd shows failed, or a
    server that answered the known-answer request wrongly, is given up at once; each target not
    ready gets its last :data:`LOG_LINES` log lines and the probe's last words printed and, with
    ``roll_back_to``, its last good files back (modes of :data:`rocmfleet.domain.lastgood.SAVED_FILES`),
    a restart and a wait of up to ``rollback_timeout_s`` for it to be ready again. Exit 1 when any
    target was not ready, even after a good rollback, else 0.

    The targets travel on stdin, not in the command: the whole command is one argument of
    ``sh -c`` on the host (SSH, then sudo), and Linux limits one argument to 128 KiB
    (``MAX_ARG_STRLEN``, ``include/uapi/linux/binfmts.h``); 64 instances with a warm-up each
    made about 180 KB of arguments.

    The restored version is waited for without the known-answer check: the expected answer is
    the *new* profile's, which the old version need not give (another model, another prompt),
    and the old version passed its own check when it was kept as last good. It must still hold
    its port, answer ``/health``, list its served name and complete one request: the port and
    name it serves (``back_port``, ``back_model``, from its ``serve.json``), not the new ones
    (then without the new profile's warm-up, whose requests name the new ones).

    Args:
        targets: the instances to wait for (those not ready yet).
        timeout_s: deadline for the new versions, seconds.
        rollback_timeout_s: deadline for the restored versions, seconds.
        interval_s: seconds between polls.
    """
    args: list[object] = [timeout_s, rollback_timeout_s, interval_s, LOG_LINES]
    args += [scripts.text("vllm-probe.sh"), scripts.text("vllm-warmup.sh")]
    lines = []
    for t in targets:
        words: list[object] = [t.name, t.unit, t.container, t.port, t.image, _ready(t, t.ready_probe), _back_ready(t)]
        words += [t.roll_back_to or "", t.files.directory, t.files.live["unit"], t.files.live["env"]]
        words.append(t.files.live["secrets"])
        lines.append(shlex.join(["target", *(str(w) for w in words)]) + "\n")
    args.append(len(lines))  # the script refuses a stdin with fewer targets (cut short, empty)
    return WaitCommand(command=scripts.command("vllm-wait.sh", *args), stdin="".join(lines))
