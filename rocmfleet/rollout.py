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
4. wait until the new server is ready (:mod:`rocmfleet.readiness`);
5. if it is not ready by the deadline, restore the *last good* files, restart, wait for the old
   version to be ready again, and still fail the host, with the new container's last log lines
   and the image it rolled back to (:func:`wait_or_roll_back_script`).

The last good version of an instance is a copy of its unit, environment and secrets files in
``/etc/rocmfleet/vllm/<instance>.last-good/`` plus ``serve.json`` (image, ``vllm serve``
arguments and environment: :func:`serve_record`), written only after the instance was ready with
exactly those files (:func:`save_last_good_script`). Step 2 is skipped when ``serve.json`` already
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

from rocmfleet.readiness import probe_script

#: Saved copies, by the name used in ``<instance>.last-good/``: the mode each live file has
#: (``roles/vllm``: unit 0644, environment and secrets 0600, all root's).
SAVED_FILES = {"unit": "644", "env": "600", "secrets": "600"}

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


@dataclass(frozen=True)
class LastGoodFiles:
    """Where one instance's live files and their last good copies are.

    Attributes:
        directory: ``/etc/rocmfleet/vllm/<instance>.last-good`` (mode 0700, root).
        live: ``{"unit": "/etc/systemd/system/vllm-<instance>.service", "env": ..., "secrets": ...}``,
            keyed like :data:`SAVED_FILES`.
    """

    directory: str
    live: Mapping[str, str]

    def saved(self, name: str) -> str:
        """The copy of live file ``name`` (``"unit"``, ``"env"`` or ``"secrets"``)."""
        return f"{self.directory}/{name}"

    @property
    def serve_json(self) -> str:
        """``<directory>/serve.json``: the :func:`serve_record` of the last good version."""
        return f"{self.directory}/serve.json"


def last_good_files(config_dir: str, instance: str, unit_path: str, env_file: str, secrets_file: str) -> LastGoodFiles:
    """The :class:`LastGoodFiles` of ``instance``, its copies in ``<config_dir>/<instance>.last-good``.

    Args:
        config_dir: the deploy's per-instance directory (``rocmfleet.vllm.CONFIG_DIR``).
        instance: instance name.
        unit_path, env_file, secrets_file: absolute paths of the live files.
    """
    return LastGoodFiles(
        directory=f"{config_dir}/{instance}.last-good",
        live={"unit": unit_path, "env": env_file, "secrets": secrets_file},
    )


def serve_record(image: str, serve_args: Sequence[str], env: Mapping[str, str]) -> str:
    """What a version of an instance runs, as one line of JSON (keys sorted) and a newline.

    Args:
        image: the image reference, ``repository:tag@sha256:...``.
        serve_args: the ``vllm serve`` arguments (``rocmfleet.vllm.serve_args``).
        env: the container environment without secrets (``rocmfleet.vllm.container_env``).

    Example: ``{"env": {"A": "1"}, "image": "r:t@sha256:...", "serve_args": ["/m", "--port", "8000"]}``
    """
    return json.dumps({"image": image, "serve_args": list(serve_args), "env": dict(env)}, sort_keys=True) + "\n"


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
# The last good copies on the host


def last_good_state_command(files: LastGoodFiles) -> str:
    """Shell printing, per saved file, ``<name> same|differs|missing`` (the copy against the live
    file; ``missing``: no copy), then ``serve <json>`` when ``serve.json`` exists. Read by
    :func:`parse_last_good_state`."""
    lines = [
        f"if [ ! -e {shlex.quote(files.saved(n))} ]; then echo '{n} missing'; "
        f"elif cmp -s {shlex.quote(files.saved(n))} {shlex.quote(files.live[n])}; then echo '{n} same'; "
        f"else echo '{n} differs'; fi"
        for n in SAVED_FILES
    ]
    serve = shlex.quote(files.serve_json)
    lines.append(f"if [ -r {serve} ]; then printf 'serve '; tr -d '\\n' < {serve}; echo; fi")
    return "; ".join(lines)


@dataclass(frozen=True)
class LastGoodState:
    """What :func:`last_good_state_command` found.

    Attributes:
        files: ``{"unit": "same" | "differs" | "missing", "env": ..., "secrets": ...}``.
        serve: the parsed ``serve.json`` (``{"image", "serve_args", "env"}``), ``None`` if absent
            or not JSON.
    """

    files: Mapping[str, str]
    serve: Mapping[str, object] | None

    @property
    def complete(self) -> bool:
        """Every file has a copy and ``serve.json`` exists: a version to roll back to."""
        return self.serve is not None and all(self.files.get(n) in ("same", "differs") for n in SAVED_FILES)

    @property
    def same(self) -> bool:
        """Every live file equals its copy."""
        return all(self.files.get(n) == "same" for n in SAVED_FILES)

    @property
    def image(self) -> str | None:
        """The last good version's image, from ``serve.json``."""
        image = (self.serve or {}).get("image")
        return image if isinstance(image, str) else None


def parse_last_good_state(lines: Sequence[str]) -> LastGoodState:
    """Parse :func:`last_good_state_command`'s output; unknown lines are ignored."""
    files: dict[str, str] = {}
    serve = None
    for line in lines:
        key, _, value = line.strip().partition(" ")
        if key in SAVED_FILES and value in ("same", "differs", "missing"):
            files[key] = value
        elif key == "serve":
            try:
                parsed = json.loads(value)
            except ValueError:
                parsed = None
            serve = parsed if isinstance(parsed, dict) else None
    return LastGoodState(files=files, serve=serve)


def save_last_good_script(files: LastGoodFiles, record: str) -> str:
    """Shell that copies the live files into the last good directory and writes ``serve.json``.

    Copies are root's, mode 0600 in a 0700 directory (the secrets file holds secret values; it
    is copied on the host and never printed). ``serve.json`` is written to a temporary file and
    renamed, so a partial write never looks like a complete last good version.

    Args:
        files: the instance's files.
        record: :func:`serve_record` of the version now running and ready.
    """
    d = shlex.quote(files.directory)
    copies = [
        f"install -m 600 -o root -g root {shlex.quote(files.live[n])} {shlex.quote(files.saved(n))}"
        for n in SAVED_FILES
    ]
    serve = shlex.quote(files.serve_json)
    return " && ".join(
        [
            f"install -d -m 700 -o root -g root {d}",
            *copies,
            f"printf '%s' {shlex.quote(record)} > {serve}.tmp",
            f"chmod 600 {serve}.tmp",
            f"mv {serve}.tmp {serve}",
        ]
    )


def restore_commands(files: LastGoodFiles) -> list[str]:
    """Commands that put the last good copies back as the live files, with the live files' modes."""
    return [
        f"install -m {mode} -o root -g root {shlex.quote(files.saved(n))} {shlex.quote(files.live[n])}"
        for n, mode in SAVED_FILES.items()
    ]


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
        warmup: shell that sends the profile's warm-up requests (:func:`rocmfleet.warmup.script`,
            ``warmup_at_start``); run once the probe passes, and the instance counts as ready only
            when it succeeded, so a cold instance never takes user traffic first.
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


def _logs(target: WaitTarget) -> str:
    """The container's last log lines on stderr; from the journal when the container is gone
    (a container removed by its next start, or never created: the unit's journal holds the output)."""
    container, unit = shlex.quote(target.container), shlex.quote(target.unit)
    return (
        f"{{ docker logs --tail {LOG_LINES} {container} 2>&1 "
        f"|| journalctl --no-pager -o cat -n {LOG_LINES} -u {unit}; }} >&2"
    )


def _ready(target: WaitTarget) -> str:
    """Shell that exits 0 when ``target`` is ready: the probe, then its warm-up (once) if it has one."""
    probe = probe_script(target.port, target.model, target.container)
    return f"{probe} && {target.warmup}" if target.warmup else probe


def _wait_loop(flags: Sequence[tuple[str, str, str, str | None]], timeout_s: int, interval_s: int) -> list[str]:
    """Poll until every ``(ready_var, active_var, probe, unit)`` with ``$active_var = 1`` is ready, or
    the deadline: ``ready_var`` ends 1 for those that answered. A ``unit`` (not ``None``) that systemd
    shows failed (no restart coming: its start limit, or the GPUs held by another process) is not
    waited for any longer: ``active_var`` becomes 0, saying so."""
    lines = [f"deadline=$(( $(date +%s) + {timeout_s} ))", "while :; do", "  all_ready=1"]
    for ready, active, probe, unit in flags:
        lines += [
            f"  if [ ${active} = 1 ] && [ ${ready} = 0 ]; then",
            f"    if ( {probe} ) >/dev/null 2>&1; then {ready}=1;",
        ]
        if unit is not None:
            said = f"{unit} failed (see systemctl status {unit}); not waiting for it any longer"
            lines.append(
                f"    elif systemctl is-failed --quiet {shlex.quote(unit)}; then {active}=0; "
                f"echo {shlex.quote(said)} >&2;"
            )
        lines += ["    else all_ready=0; fi", "  fi"]
    lines += [
        "  [ $all_ready = 1 ] && break",
        "  [ $(date +%s) -ge $deadline ] && break",
        f"  sleep {interval_s}",
        "done",
    ]
    return lines


def wait_or_roll_back_script(
    targets: Sequence[WaitTarget], timeout_s: int, rollback_timeout_s: int, interval_s: int = 5
) -> str:
    """Shell that waits until every target is ready, and rolls back those that are not by the deadline.

    1. Poll :func:`rocmfleet.readiness.probe_script` for all targets until all are ready or
       ``timeout_s`` seconds have passed (one deadline: they were restarted together); a target
       whose unit systemd shows failed (start limit hit, GPUs held) is given up at once.
    2. For each target not ready: print its last :data:`LOG_LINES` log lines; if it has a version
       to roll back to (``roll_back_to``), put its last good files back (:func:`restore_commands`).
    3. If any were restored: ``systemctl daemon-reload``, ``reset-failed`` (a crash loop may have
       hit the unit's start limit) and ``restart`` those units, then poll them again for up to
       ``rollback_timeout_s`` seconds and say, for each, that it rolled back to which image and
       whether that version is ready again (with its log lines when it is not).
    4. Exit 1 when any target was not ready in step 1 (the host fails even after a good rollback),
       else 0.

    Args:
        targets: the instances to wait for (those not ready yet).
        timeout_s: deadline for the new versions, seconds.
        rollback_timeout_s: deadline for the restored versions, seconds.
        interval_s: seconds between polls.
    """
    lines = ["failed=0", "reload=0"]
    for i, _ in enumerate(targets):
        lines.append(f"r{i}=0; b{i}=0; q{i}=0; on{i}=1")
    lines += _wait_loop(
        [(f"r{i}", f"on{i}", _ready(t), t.unit) for i, t in enumerate(targets)],
        timeout_s,
        interval_s,
    )
    for i, t in enumerate(targets):
        lines += [
            f"if [ $r{i} = 0 ]; then",
            "  failed=1",
            "  echo "
            + shlex.quote(
                f"vLLM instance {t.name} ({t.unit}, port {t.port}, image {t.image}) not ready after {timeout_s} s;"
                f" last {LOG_LINES} log lines of its container:"
            )
            + " >&2",
            f"  {_logs(t)}",
        ]
        if t.roll_back_to is not None:
            restore = " && ".join(restore_commands(t.files))
            lines += [
                "  echo "
                + shlex.quote(f"{t.unit}: restoring its last good unit and environment (image {t.roll_back_to})")
                + " >&2",
                f"  if {restore}; then b{i}=1; reload=1; else echo "
                + shlex.quote(f"{t.unit}: could not restore its last good files")
                + " >&2; fi",
            ]
        else:
            lines.append(
                "  echo " + shlex.quote(f"{t.unit}: no last good version to roll back to; left as it is") + " >&2"
            )
        lines.append("fi")
    rollbackable = [(i, t) for i, t in enumerate(targets) if t.roll_back_to is not None]
    if rollbackable:
        lines += ["if [ $reload = 1 ]; then", "  systemctl daemon-reload"]
        for i, t in rollbackable:
            unit = shlex.quote(t.unit)
            lines.append(
                f"  if [ $b{i} = 1 ]; then systemctl reset-failed {unit} 2>/dev/null; systemctl restart {unit}; fi"
            )
        lines += [
            "  " + line
            for line in _wait_loop(
                [(f"q{i}", f"b{i}", _ready(t), None) for i, t in rollbackable],
                rollback_timeout_s,
                interval_s,
            )
        ]
        for i, t in rollbackable:
            back = f"{t.unit} rolled back to image {t.roll_back_to}"
            lines += [
                f"  if [ $b{i} = 1 ] && [ $q{i} = 1 ]; then echo " + shlex.quote(f"{back}: ready again") + " >&2",
                f"  elif [ $b{i} = 1 ]; then echo "
                + shlex.quote(f"{back}, but it is not ready after {rollback_timeout_s} s either; last log lines:")
                + f" >&2; {_logs(t)}",
                "  fi",
            ]
        lines.append("fi")
    lines.append("exit $failed")
    return "\n".join(lines)
