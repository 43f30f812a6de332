"""The ``rocmfleet`` command.

rocmfleet validate INVENTORY          check every host's data; exit 2 on any problem
rocmfleet check INVENTORY             compliance checks on every host; exit 0 pass, 1 fail, 2 no run
rocmfleet bench INVENTORY             smoke benchmark on every host; exit 0 pass, 1 fail, 2 no run
rocmfleet rollout INVENTORY [--bake]  roll an image across the fleet: canary, gated batches, rollback
rocmfleet restart INVENTORY           rolling restart with drain and gate (same machinery, same image)
rocmfleet status INVENTORY            per host and instance: unit, image, ready, uptime, rollout step
rocmfleet metrics targets INVENTORY [-o FILE]
                                      Prometheus file_sd targets: every vLLM instance and exporter
rocmfleet cache bake INVENTORY --host H [--write GROUP_FILE]
                                      bake the compile caches into an image and push it
rocmfleet vault encrypt-string NAME   read a secret on stdin, print `NAME: !vault |` YAML
rocmfleet vault rekey FILE...         re-encrypt vault data with a new password
rocmfleet schema                      print the JSON Schema of host data (for editors)
"""

from __future__ import annotations

import argparse
import getpass
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from rocmfleet.config import vault

#: An ``argparse`` number type: ``int`` or ``float``.
_Number = TypeVar("_Number", int, float)


def _validate(args: argparse.Namespace) -> int:
    from rocmfleet.config.validate import EXIT_INVALID, InventoryError, placeholder_warning, report, validate_inventory

    try:
        configs, problems = validate_inventory(args.inventory)
    except InventoryError as exc:
        print(f"rocmfleet: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if problems:
        print(f"rocmfleet: {report(problems)}", file=sys.stderr)
        return EXIT_INVALID
    for name, config in configs.items():
        instances = ", ".join(f"{i.name}:{i.port}" for i in config.instances())
        print(f"{name}: ok ({config.profile.name}, {config.image.reference}; {instances})")
    if warning := placeholder_warning(configs):
        print(f"rocmfleet: warning: {warning}", file=sys.stderr)
    return 0


def _init(args: argparse.Namespace) -> int:
    import shlex

    from rocmfleet.config.site import SiteExistsError, init

    if not args.directory.strip():
        print("rocmfleet: init: give a directory (an empty one writes nowhere you meant)", file=sys.stderr)
        return 2
    directory = Path(args.directory)
    try:
        written = init(directory)
    except SiteExistsError as exc:
        print(f"rocmfleet: init {directory}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"rocmfleet: init {directory}: {exc.strerror or exc}: {exc.filename or directory}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    print(
        f"next: cd {shlex.quote(str(directory))}; edit inventories/prod.py and group_vars/; "
        "rocmfleet validate inventories/prod.py; pyinfra inventories/prod.py deploy.py --dry"
    )
    return 0


def _data_overrides(pairs: list[str]) -> dict[str, Any]:
    """``--data KEY=VALUE`` pairs, each value parsed as pyinfra's own ``--data`` parses it."""
    from pyinfra_cli.util import parse_cli_arg

    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--data {pair!r}: expected KEY=VALUE")
        overrides[key] = parse_cli_arg(value)
    return overrides


def _limit(values: list[str] | None) -> list[str] | None:
    """``--limit`` values, repeatable and comma-separated (``--limit a,b --limit c``), as pyinfra."""
    return [item.strip() for value in values or [] for item in value.split(",") if item.strip()] or None


LIMIT_HELP = "host, glob or group (repeatable, or comma-separated)"
EXCLUDE_HELP = "host, glob or group left out, after --limit (repeatable, or comma-separated)"


def _fleet_arguments(parser: argparse.ArgumentParser) -> None:
    """The inventory and the hosts of it a fleet command works on (``--limit``, ``--exclude``)."""
    parser.add_argument("inventory", help="pyinfra inventory file, e.g. inventories/prod.py")
    parser.add_argument("--limit", action="append", type=_limit_value, help=LIMIT_HELP)
    parser.add_argument("--exclude", action="append", type=_limit_value, help=EXCLUDE_HELP)


def _limit_value(text: str) -> str:
    """One ``--limit`` value; empty (``--limit ""``, ``--limit ,``: an unset shell variable) is an
    error, never "every host"."""
    if not any(item.strip() for item in text.split(",")):
        raise argparse.ArgumentTypeError(f"{text!r} names no host: give a host, glob or group")
    return text


def _image_value(text: str) -> str:
    """One ``--image REPO:TAG``, checked with Docker's reference grammar before any connection or
    registry request; empty (an unset shell variable) is an error, never "the pinned image"."""
    from rocmfleet.fleet.registry import parse_image

    try:
        parse_image(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--image {text!r}: ")) from None
    return text


def _writable(path: str | None, option: str) -> None:
    """Refuse an output path whose directory does not exist, before the run rather than after it."""
    if path and not Path(path).resolve().parent.is_dir():
        raise ValueError(f"{option} {path}: directory {Path(path).resolve().parent} does not exist")
    if path and Path(path).is_dir():
        raise ValueError(f"{option} {path}: is a directory; name a file to write")


def _positive(kind: Callable[[str], _Number]) -> Callable[[str], _Number]:
    def parse(text: str) -> _Number:
        value = kind(text)
        if not math.isfinite(value) or value <= 0:  # float("inf") and float("nan") parse
            raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
        return value

    return parse


def _count(text: str) -> int:
    """A count ``>= 0`` and at most 10 (``--retries``: 10 doublings from 10 s are hours)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number from 0 to 10, got {text}") from None
    if not 0 <= value <= 10:
        raise argparse.ArgumentTypeError(f"must be a whole number from 0 to 10, got {text}")
    return value


def _soak_value(text: str) -> int:
    """``--soak``: a duration in seconds (:func:`rocmfleet.domain.soak.parse_duration`)."""
    from rocmfleet.domain.soak import DurationError, parse_duration

    try:
        return parse_duration(text, option="")
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _check(args: argparse.Namespace) -> int:
    from rocmfleet.fleet.check import compliance
    from rocmfleet.fleet.inventory import FleetError, load_fleet

    try:
        overrides = _data_overrides(args.data)
        compliance.module_paths(args.select)  # an unknown module is refused before any connection
        for option, given in (("--junit-xml", args.junit_xml), ("--json", args.json)):
            if given is not None and not given.strip():  # an unset shell variable: never "no report"
                raise ValueError(f"{option} {given!r}: give a file, or - for standard output")
        if args.junit_xml == args.json == "-":
            raise ValueError("--junit-xml - and --json -: one report can go to standard output")
        _writable(None if args.junit_xml == "-" else args.junit_xml, "--junit-xml")
        _writable(None if args.json == "-" else args.json, "--json")
        targets = load_fleet(args.inventory, _limit(args.limit), overrides, exclude=_limit(args.exclude))
    except (FleetError, ValueError) as exc:
        print(f"rocmfleet: {exc}", file=sys.stderr)
        return 2

    width = max(len(t.name) for t in targets)
    # A report on standard output (`-`, as jq and junit tools read it) keeps it to itself: the
    # progress lines and the summary go to standard error.
    said = sys.stderr if "-" in (args.junit_xml, args.json) else sys.stdout

    def progress(results: list[compliance.CheckResult]) -> None:
        for result in results:
            print(compliance.line(result, width), flush=True, file=said)

    results = compliance.run_fleet(targets, args.select, args.timeout_s, args.parallel, on_host=progress)
    print(compliance.summary_table(results), file=said)
    status = compliance.exit_status(results)
    reports: list[tuple[str, str | None, Callable[[], str]]] = [
        ("--junit-xml", args.junit_xml, lambda: compliance.junit_xml(results)),
        ("--json", args.json, lambda: compliance.json_report(results, args.inventory)),
    ]
    for option, path, render in reports:
        if path == "-":
            sys.stdout.write(render())
        elif path:
            try:
                Path(path).write_text(render())
            except OSError as exc:  # the checks ran; their report could not be kept: not a pass
                print(f"rocmfleet: {option} {path}: cannot write the report ({exc.strerror or exc})", file=sys.stderr)
                status = max(status, 1)
    return status


def _bench(args: argparse.Namespace) -> int:
    from rocmfleet.fleet.bench import benchrun
    from rocmfleet.fleet.inventory import FleetError, load_fleet

    try:
        targets = load_fleet(args.inventory, _limit(args.limit), exclude=_limit(args.exclude))
    except FleetError as exc:
        print(f"rocmfleet: {exc}", file=sys.stderr)
        return 2
    said = sys.stderr if args.json else sys.stdout  # with --json, stdout holds the report alone

    def report(run_id: str, run_dir: Path, hosts: list[benchrun.HostOutcome]) -> None:
        sys.stdout.write(benchrun.json_report(run_id, run_dir, hosts))

    try:
        return benchrun.bench(
            targets,
            args.results_dir,
            args.timeout_s,
            emit=lambda line: print(line, flush=True, file=said),
            on_done=report if args.json else None,
        )
    except OSError as exc:  # the results directory cannot be written: nothing ran
        print(f"rocmfleet: {exc}", file=sys.stderr)
        return 2


def _rollout(args: argparse.Namespace) -> int:
    """``rollout`` and ``restart``: the run, then with ``--json`` its record (``null`` when refused) on stdout."""
    code, record = _rollout_run(args)
    if args.json:
        print(json.dumps({"exit_status": code, "rollout": record}, indent=2))
    return code


def _rollout_run(args: argparse.Namespace) -> tuple[int, Any]:
    import rich.console

    from rocmfleet.fleet.rollout import command
    from rocmfleet.fleet.rollout import progress as rollout_progress

    console = rich.console.Console(stderr=True)

    def progress(total: int) -> rollout_progress.Progress:
        if console.is_terminal:
            return rollout_progress.RichProgress(total, console)
        return rollout_progress.LineProgress(lambda line: print(line, file=sys.stderr, flush=True))

    if (getattr(args, "image", None) or getattr(args, "bake", False)) and (args.limit or args.exclude):
        given = "--bake" if getattr(args, "bake", False) else "--image"
        narrowed = "--limit" if args.limit else "--exclude"
        print(
            f"rocmfleet: {given} with {narrowed}: {given} rewrites the group data file that pins the image, for every "
            f"host it applies to, so the hosts outside {narrowed} would switch at their next plain deploy, with no "
            "canary, drain or gate; pin the new image in a group (or host) file of those hosts instead, then "
            "`rocmfleet rollout INVENTORY --limit ...` without --image",
            file=sys.stderr,
        )
        return 2, None
    if args.dry and getattr(args, "bake", False):
        print("rocmfleet: --dry with --bake: the bake builds and pushes an image; plan the rollout with "
              "--dry --image BAKED_REF after `rocmfleet cache bake`", file=sys.stderr)  # fmt: skip
        return 2, None
    if args.command == "restart" and args.soak is not None:
        print("rocmfleet: --soak with restart: a soak compares a new image with the old one; a restart changes no "
              "image (roll out a new image with `rocmfleet rollout INVENTORY --image ... --soak D`)",
              file=sys.stderr)  # fmt: skip
        return 2, None
    if getattr(args, "bake", False):
        if getattr(args, "soak", None) is not None:
            print("rocmfleet: --soak with --bake: run `rocmfleet cache bake`, then the rollout of the baked image "
                  "with --soak", file=sys.stderr)  # fmt: skip
            return 2, None
        if args.resume or args.rollback:
            print("rocmfleet: --bake starts a new rollout; not with --resume or --rollback", file=sys.stderr)
            return 2, None
        if args.json:
            print("rocmfleet: --json with --bake: run `rocmfleet cache bake`, then the rollout with --json",
                  file=sys.stderr)  # fmt: skip
            return 2, None
        if not args.yes and not _interactive():  # the bake changes a host before any plan
            _cannot_ask("")
            return 2, None
        from rocmfleet.fleet import inventory
        from rocmfleet.fleet.cache import cachebake
        from rocmfleet.fleet.rollout import bake, fleetimage

        # looked up here, when called: tests replace them in their modules
        steps = bake.BakeSteps(
            inventory.load_targets, fleetimage.resolve, fleetimage.with_image, cachebake.bake, command.run_rollout
        )
        baked = bake.bake_and_roll(
            args.inventory,
            args.image,
            canary=args.canary,
            groups=command.Groups(canary=args.canary_group, pin=args.group),
            limit=_limit(args.limit),
            emit=lambda line: print(line, flush=True),
            error=rollout_progress.to_stderr,
            max_unavailable=args.max_unavailable,
            force=args.force,
            progress_factory=progress,
            steps=steps,
        )
        return baked, None
    soak = None
    if getattr(args, "soak_batches", False) and getattr(args, "soak", None) is None:
        print("rocmfleet: --soak-batches with no --soak: give the soak's duration, e.g. --soak 5m --soak-batches",
              file=sys.stderr)  # fmt: skip
        return 2, None
    if getattr(args, "soak", None) is not None:
        from rocmfleet.fleet.rollout.state import SoakPlan

        soak = SoakPlan(duration_s=args.soak, every_batch=args.soak_batches)
    limit = _limit(args.limit)
    if args.exclude:  # the hosts left, by name: the recorded plan names them as a --limit would
        if args.resume or args.rollback:
            print("rocmfleet: --exclude with --resume or --rollback: they run the recorded plan", file=sys.stderr)
            return 2, None
        from rocmfleet.fleet.inventory import FleetError, load_targets

        try:
            limit = list(load_targets(args.inventory, limit, exclude=_limit(args.exclude)))
        except FleetError as exc:
            print(f"rocmfleet: {exc}", file=sys.stderr)
            return 2, None
    ask = None if args.yes or args.dry else _ask if _interactive() else _cannot_ask
    said = sys.stderr if args.json else sys.stdout  # with --json, stdout holds the record alone
    before = _recorded(args.inventory) if args.json else None
    code = command.run_rollout(
        args.inventory,
        kind=args.command,
        image=getattr(args, "image", None),
        canary=args.canary,
        max_unavailable=args.max_unavailable,
        force=args.force,
        resume=args.resume,
        rollback=args.rollback,
        limit=limit,
        emit=lambda line: print(line, flush=True, file=said),
        error=rollout_progress.to_stderr,
        progress_factory=progress,
        start=command.StartOptions(dry=args.dry, confirm=ask),
        retries=args.retries,
        soak=soak,
        groups=command.Groups(canary=args.canary_group, pin=getattr(args, "group", None)),
    )
    after = _recorded(args.inventory) if args.json else None
    if code == 2 or after is None:  # 2: nothing was started (or resumed, or rolled back)
        return code, None
    mine = before is None or after.id != before.id or args.resume or args.rollback
    return code, after.model_dump(mode="json") if mine else None


def _recorded(inventory: str) -> Any:
    """The rollout state recorded for ``inventory`` now (a ``RolloutState``), or ``None``."""
    from rocmfleet.fleet.rollout import state as rstate

    try:
        return rstate.load_state(rstate.state_path(rstate.results_root(None, inventory), inventory))
    except (OSError, ValueError):
        return None


def _cannot_ask(_question: str) -> bool:
    """No terminal to ask on (a script, cron, CI): a start needs ``-y``, as pyinfra's prompt needs it."""
    print("rocmfleet: standard input is not a terminal to ask on: pass -y to start (--dry shows the plan)",
          file=sys.stderr)  # fmt: skip
    return False


def _interactive() -> bool:
    """Whether standard input is a terminal to ask on (closed, ``<&-``, is not)."""
    return sys.stdin is not None and sys.stdin.isatty()


def _ask(question: str) -> bool:
    """``question [y/N]`` on standard error (standard output may be a ``--json`` report), the
    answer from the terminal; only ``y`` or ``yes`` go on (EOF and Ctrl-D do not)."""
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        return input().strip().lower() in ("y", "yes")
    except EOFError:
        return False


def _status(args: argparse.Namespace) -> int:
    from rocmfleet.fleet.rollout.fleetimage import CommandError
    from rocmfleet.fleet.rollout.report import drift_cell, status_json
    from rocmfleet.fleet.rollout.status import fleet_status

    try:
        rows, state = fleet_status(args.inventory, _limit(args.limit), exclude=_limit(args.exclude))
    except (CommandError, ValueError) as exc:
        print(f"rocmfleet: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(status_json([r.row() for r in rows], state), end="")
    else:
        import rich.console
        import rich.table

        steps = state.hosts if state is not None and state.blocking else {}
        table = rich.table.Table(
            "host", "instance", "unit", "image", "ready", "uptime", "rollout step", "drift", box=None
        )
        for r in rows:
            uptime = "-" if r.uptime_s is None else f"{r.uptime_s / 3600:.1f} h"
            step = steps[r.host].step if r.host in steps else "-"
            ready = {True: "yes", False: "NO", None: "-"}[r.ready] + (f" ({r.not_ready})" if r.not_ready else "")
            if r.image is None:  # the host could not be read: the error in place of the image
                image, drift = r.error or "-", drift_cell(r.drift)
            else:  # the image was read; an error is the drift read's, said in its cell
                image, drift = str(r.image), r.error if r.error and r.drift is None else drift_cell(r.drift)
            unit = f"{r.active}/{r.sub}"
            if r.error and r.error.startswith("watchdog gave up"):  # why the unit is left failed
                unit += f" ({r.error})"
            table.add_row(r.host, r.instance, unit, image, ready, uptime, step, drift)
        console = rich.console.Console()
        if not console.is_terminal:  # piped (`| grep`, `| cat`): whole cells, never `active/runn…`
            console = rich.console.Console(width=10_000)
        console.print(table)
        print(_status_summary(rows))
        if state is not None:
            what = state.target.reference if state.target else "same image"
            print(f"{state.kind} {state.id} ({what}): {state.status}")
    bad = any(r.error or r.ready is False for r in rows)
    return 1 if bad else 0


def _version() -> str:
    """The installed distribution's version (``pyproject.toml``), or ``unknown`` from a bare checkout."""
    import importlib.metadata

    try:
        return importlib.metadata.version("rocmfleet")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _status_summary(rows: list[Any]) -> str:
    """``3 host(s), 4 instance(s): 3 ready, 1 not ready; 0 host(s) unreadable``."""
    hosts = {r.host for r in rows}
    unreadable = {r.host for r in rows if r.image is None and r.error}
    ready = sum(r.ready is True for r in rows)
    not_ready = sum(r.ready is False for r in rows)
    return (
        f"{len(hosts)} host(s), {len(rows)} instance(s): {ready} ready, {not_ready} not ready; "
        f"{len(unreadable)} host(s) unreadable"
    )


def _metrics_targets(args: argparse.Namespace) -> int:
    from rocmfleet.fleet.metrics import command

    return command.run(args.inventory, args.output)


def _cache_bake(args: argparse.Namespace) -> int:
    from rocmfleet.domain.cachedirs import baked_tag
    from rocmfleet.fleet.cache import cachebake
    from rocmfleet.fleet.connect import CommandTimeout, ConnectError
    from rocmfleet.fleet.inventory import FleetError, load_fleet

    try:
        _writable(args.write, "--write")
        targets = load_fleet(args.inventory, [args.host], option="--host")
        if len(targets) != 1:
            raise ValueError(f"--host {args.host} matches {len(targets)} hosts; name one")
        if args.write and (unread := _not_loaded(args.write)):
            raise ValueError(f"--write {args.write}: {unread}")
        if args.write:  # the edit is tried before the bake, so a file it cannot edit stops nothing half-way
            cachebake.group_data_with_image(_read_text(args.write), "r", "t", "sha256:" + "0" * 64, args.write)
    except (FleetError, ValueError) as exc:
        print(f"rocmfleet: {exc}", file=sys.stderr)
        return 2
    from rocmfleet.fleet.rollout.state import deploy_refusal

    if refusal := deploy_refusal(args.inventory):  # the bake stops an instance: not under a rollout
        print(f"rocmfleet: {refusal}", file=sys.stderr)
        return 2
    config = targets[0].config
    instance = config.instances()[0]
    plan = (
        f"bake on {args.host}: stop its instance {instance.name} (port {instance.port}) meanwhile, warm it up from "
        f"empty caches with {config.image.reference}, build and push "
        f"{config.image.repository}:{baked_tag(config.image.tag, '0' * 12).replace('0' * 12, '<cache key>')} "
        "(the key is read on the host)" + (f", then pin it in {args.write}" if args.write else "")
    )
    print(f"plan: {plan}")
    if args.dry:
        print("--dry: nothing was changed")
        return 0
    if not args.yes and not (_ask if _interactive() else _cannot_ask)("start this bake?"):
        print("rocmfleet: not confirmed; nothing was changed", file=sys.stderr)
        return 2
    try:
        baked = cachebake.bake(targets[0], emit=lambda line: print(line, flush=True))
    except (cachebake.BakeError, ConnectError, CommandTimeout) as exc:
        print(f"rocmfleet: {exc}", file=sys.stderr)
        return 1
    print(baked.reference)
    print(f"digest {baked.digest}  key {baked.key.short}  {baked.manifest.files} files, {baked.manifest.bytes} bytes")
    if args.write:
        path = Path(args.write)
        try:
            text = cachebake.group_data_with_image(
                _read_text(args.write), baked.repository, baked.tag, baked.digest, args.write
            )
            path.write_text(text, encoding="utf-8")
        except (OSError, ValueError) as exc:
            print(
                f"rocmfleet: pushed {baked.reference}, but --write {path} failed: {exc}; pin it by hand",
                file=sys.stderr,
            )
            return 1
        print(f"{path}: vllm_image_repository, vllm_image_tag, vllm_image_digest set")
    return 0


def _not_loaded(path: str) -> str | None:
    """Why the group file ``path`` would not pin an image for the inventory just loaded: it is not
    one of the group files the inventory read (a typo, another checkout), so the baked image
    written there would never be deployed. None when it is one."""
    from rocmfleet.config import groupvars

    loaded = [g.path for g in groupvars.LOADED]
    if Path(path).resolve() in {p.resolve() for p in loaded}:
        return None
    return "the inventory never loads this file (it reads " + (", ".join(map(str, loaded)) or "no group file") + ")"


def _read_text(path: str) -> str:
    """A group data file's text (``""`` when it does not exist yet).

    Raises:
        ValueError: it cannot be read or is not UTF-8, naming the file.
    """
    try:
        return Path(path).read_text(encoding="utf-8") if Path(path).exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read it as UTF-8 text: {exc}") from None


def _encrypt_string(args: argparse.Namespace) -> int:
    if sys.stdin is None:
        print(f"rocmfleet: {args.name}: standard input is closed: pipe the secret in", file=sys.stderr)
        return 2
    secret = sys.stdin.read().rstrip("\n") if not sys.stdin.isatty() else getpass.getpass(f"{args.name}: ")
    if not secret:
        print(f"rocmfleet: {args.name}: empty secret (nothing on stdin)", file=sys.stderr)
        return 2
    try:
        print(f"{args.name}: {vault.inline(secret)}", end="")
    except vault.VaultError as exc:
        print(f"rocmfleet: {exc}", file=sys.stderr)
        return 2
    return 0


def _rekey(args: argparse.Namespace) -> int:
    """Re-encrypt every file, or none: each is re-encrypted in a scratch copy before any is replaced."""
    import shutil
    import tempfile

    old = vault.password_file()
    if old is None:
        print(
            "rocmfleet: set ROCMFLEET_VAULT_PASSWORD_FILE (or ANSIBLE_VAULT_PASSWORD_FILE) to the current password"
            " file",
            file=sys.stderr,
        )
        return 2
    path = Path(args.new_password_file)
    try:
        new = path.read_bytes().strip()
        if not new:
            raise vault.VaultError(f"--new-password-file {path}: empty; a vault password cannot be empty")
        path = old
        current = old.read_bytes().strip()
        with tempfile.TemporaryDirectory(prefix="rocmfleet-rekey-") as scratch:
            done = []
            for index, path in enumerate(map(Path, args.files)):
                copy = Path(scratch) / f"{index}.yml"
                shutil.copyfile(path, copy)
                try:
                    count = vault.rekey(copy, current, new)
                except vault.VaultError as exc:  # name the user's file, not the scratch copy
                    raise vault.VaultError(str(exc).replace(str(copy), str(path))) from None
                done.append((path, copy, count))
            for path, copy, count in done:
                path.write_text(copy.read_text())
                print(f"{path}: {count} vault value(s) re-encrypted")
    except vault.VaultError as exc:
        print(f"rocmfleet: {exc} (no file was changed)", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"rocmfleet: {path}: {exc.strerror or exc} (no file was changed)", file=sys.stderr)
        return 2
    return 0


def _schema(_args: argparse.Namespace) -> int:
    from rocmfleet.config.reference import json_schema

    print(json_schema(), end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``rocmfleet`` command's parser: every subcommand, its options and its exit statuses
    (``docs/reference/cli.md`` is generated from it by :mod:`rocmfleet.clidoc`)."""
    parser = argparse.ArgumentParser(prog="rocmfleet", description="MI300X vLLM fleet toolkit")
    parser.add_argument("--version", action="version", version=f"rocmfleet {_version()}")
    verbose_help = "tell each command run on a host, once it ends, on standard error (host, seconds, exit status)"
    parser.add_argument("-v", "--verbose", action="count", default=0, help=verbose_help)
    sub = parser.add_subparsers(dest="command", required=True)
    i = sub.add_parser(
        "init",
        help="write an operator's repository: deploy.py, inventories/prod.py, group_vars/, .gitignore, README",
        epilog="exit status: 0 written; 2 a file is already there or cannot be written (nothing is overwritten)",
    )
    i.add_argument("directory", help="where (created when missing; may hold other files)")
    i.set_defaults(func=_init)
    p = sub.add_parser(
        "validate",
        help="validate an inventory and its group_vars before any connection",
        epilog="exit status: 0 every host's data is valid (a placeholder digest is warned about); "
        "2 a problem (each with its file, key, value and what is allowed)",
    )
    p.add_argument("inventory", help="pyinfra inventory file, e.g. inventories/prod.py")
    p.set_defaults(func=_validate)
    exits = "exit status: 0 all passed; 1 a check or host failed; 2 the run could not happen (bad inventory or options)"
    c = sub.add_parser("check", help="run the compliance checks against every host of an inventory", epilog=exits)
    _fleet_arguments(c)
    c.add_argument(
        "--select",
        type=lambda v: v.split(","),
        help="check modules, comma-separated: rocm, tuning, docker, gpu, vllm, cache, metrics, cvs (default: all)",
    )
    c.add_argument("--data", action="append", default=[], metavar="KEY=VALUE", help="override data, as pyinfra's")
    c.add_argument(
        "--timeout-s",
        type=_positive(float),
        default=300,
        help="deadline per host: seconds of its commands (default 300)",
    )
    c.add_argument(
        "--parallel",
        type=_positive(int),
        default=10,
        help="check processes at once, each checking its share of the hosts in turn (default 10)",
    )
    c.add_argument("--junit-xml", metavar="PATH", help="write a JUnit XML report (-: standard output)")
    c.add_argument("--json", metavar="PATH", help="write a JSON report (-: standard output)")
    c.set_defaults(func=_check)
    b = sub.add_parser(
        "bench",
        help="run the smoke benchmark (vllm bench serve) on every host of an inventory",
        epilog="exit status: 0 every host met its profile's thresholds; 1 a host failed them or its benchmark "
        "did not run; 2 the run could not happen (bad inventory or options, a results directory it cannot write)",
    )
    _fleet_arguments(b)
    b.add_argument("--results-dir", default="bench-results", help="results root (default ./bench-results)")
    b.add_argument(
        "--json", action="store_true", help="print a JSON report to standard output (progress to standard error)"
    )
    b.add_argument(
        "--timeout-s", type=_positive(float), default=3600, help="deadline per host in seconds (default 3600)"
    )
    b.set_defaults(func=_bench)
    for name, what in (
        ("rollout", "roll an image across the fleet: canary, batches gated by readiness, checks and the benchmark"),
        ("restart", "rolling restart of the vLLM units: the rollout's batches, drain and gate, with the same image"),
    ):
        failed = "rolled back" if name == "rollout" else "left drained, not rolled back"
        ro = sub.add_parser(
            name,
            help=what,
            epilog=f"exit status: 0 done; 1 a host failed ({failed}); 2 not started; 3 paused (a gate could not "
            "judge the image: the registry, SSH, a hook or the benchmark client failed past --retries; nothing "
            "rolled back, --resume continues). Errors go to stderr. "
            + (
                "--resume and --rollback run the recorded plan: not with --image, --group, --canary, "
                "--canary-group, --max-unavailable, --limit or --force"
                if name == "rollout"
                else "--resume runs the recorded plan (a failed host is restarted and gated again): not with "
                "--canary, --canary-group, --max-unavailable, --limit or --force; --rollback and --soak are refused "
                "(a restart changes no image)"
            ),
        )
        _fleet_arguments(ro)
        if name == "rollout":
            ro.add_argument(
                "--image",
                metavar="REPO:TAG[@DIGEST]",
                type=_image_value,
                help="resolve its digest now (or check that the registry has the pinned one); pin both in group data",
            )
            ro.add_argument(
                "--group",
                metavar="GROUP",
                help="with --image, on a site that pins the image per group: roll this group's pin (its group "
                "file, its hosts)",
            )
            ro.add_argument(
                "--soak",
                metavar="DURATION",
                type=_soak_value,
                help="after its gate, keep the canary in service on the new image for DURATION (90s, 5m, 1h; "
                "10s to 24h), then compare its error rate and TTFT/TPOT p50/p99 with the hosts not yet switched "
                "over the same window (thresholds: the profile's soak); a fail rolls back, no traffic or no "
                "metrics pauses. With --resume: soak as now given from there on",
            )
            ro.add_argument(
                "--soak-batches",
                action="store_true",
                help="with --soak: soak every batch, not only the canary (the last one, with no host left on "
                "the old image, on its error rate alone)",
            )
            ro.add_argument(
                "--bake",
                action="store_true",
                help="bake the compile caches on the canary from the image (--image or the pinned one), push, "
                "and roll the baked image out (rocmfleet cache bake, then this rollout)",
            )
        else:
            ro.add_argument(
                "--soak",
                metavar="DURATION",
                type=_soak_value,
                help="refused: a soak compares a new image with the old one, and a restart changes no image "
                "(rollout --soak)",
            )
        ro.add_argument(
            "--canary", type=int, metavar="N", help="replicas of each service switched and gated first (default 1)"
        )
        ro.add_argument("--canary-group", metavar="GROUP", help="the hosts of this inventory group are the canary")
        ro.add_argument(
            "--max-unavailable",
            metavar="N|P%",
            help="most replicas of each service out of service at once: a count, or a percentage of that "
            "service's replicas, rounded down, at least 1 (default 1)",
        )
        ro.add_argument("--force", action="store_true", help="start even when the preflight check fails")
        ro.add_argument(
            "--retries",
            type=_count,
            default=None,
            metavar="N",
            help="retries of a step that could not judge the image (registry, SSH, hook, benchmark client), "
            "10 s apart, doubling, before the rollout pauses (default 2; also with --resume)",
        )
        ro.add_argument(
            "--dry",
            action="store_true",
            help=f"show the plan ({'the digest, the group file edit, ' if name == 'rollout' else ''}the batches) "
            "after the preflight check; change nothing",
        )
        ro.add_argument(
            "-y",
            "--yes",
            action="store_true",
            help="start without asking (needed when standard input is not a terminal)",
        )
        once = ro.add_mutually_exclusive_group()
        once.add_argument("--resume", action="store_true", help="continue the recorded one")
        once.add_argument(
            "--rollback",
            action="store_true",
            help="return every switched host to its image before"
            if name == "rollout"
            else "refused: a restart changes no image (--resume finishes it)",
        )
        ro.add_argument(
            "--json",
            action="store_true",
            help="print {exit_status, rollout: the record this run left, or null} on standard output at the end "
            "(the plan and progress to standard error)",
        )
        ro.set_defaults(func=_rollout)
    st = sub.add_parser(
        "status",
        help="per host and instance: unit state, image, ready, uptime, rollout step, drift",
        epilog="exit status: 0 every instance ready; 1 an instance not ready or a host unreadable; "
        "2 bad inventory or options",
    )
    _fleet_arguments(st)
    st.add_argument("--json", action="store_true", help="print JSON instead of a table")
    st.set_defaults(func=_status)
    m = sub.add_parser("metrics", help="Prometheus metrics of the fleet: scrape targets")
    msub = m.add_subparsers(dest="metrics_command", required=True)
    mt = msub.add_parser(
        "targets",
        help="print (or write) Prometheus file_sd JSON: every vLLM instance (job vllm) and AMD exporter "
        "(job amd-device-metrics) of an inventory, labelled host, rocmfleet_instance, model, served_model_name, "
        "image_digest, gpus, vllm_version",
        epilog="no host is contacted. exit status: 0 printed or written; 2 nothing written (bad inventory or data, "
        "each problem said, or a file it cannot write)",
    )
    mt.add_argument("inventory", help="pyinfra inventory file, e.g. inventories/prod.py")
    mt.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write FILE whole (a temporary file beside it, then renamed; mode 0644) and print a summary line; "
        "FILE ends in .json, .yml or .yaml, the names Prometheus's file_sd reads (-: standard output)",
    )
    mt.set_defaults(func=_metrics_targets)
    k = sub.add_parser("cache", help="compile caches baked into images")
    ksub = k.add_subparsers(dest="cache_command", required=True)
    kb = ksub.add_parser(
        "bake",
        help="warm the profile's first instance of one host up from empty caches, build and push an image with them",
        epilog="exit status: 0 pushed; 1 the bake failed on the host; 2 bad inventory or options",
    )
    kb.add_argument("inventory", help="pyinfra inventory file, e.g. inventories/prod.py")
    kb.add_argument("--host", required=True, help="the host to bake on (a canary: one instance stops meanwhile)")
    kb.add_argument(
        "--write",
        metavar="GROUP_FILE",
        help="set vllm_image_repository/_tag/_digest to the baked image in this group_vars file",
    )
    kb.add_argument("--dry", action="store_true", help="show what the bake would stop, build and push; change nothing")
    kb.add_argument(
        "-y", "--yes", action="store_true", help="start without asking (needed when standard input is not a terminal)"
    )
    kb.set_defaults(func=_cache_bake)
    v = sub.add_parser("vault", help="ansible-vault helpers (ansible-core's library, not the binary)")
    vsub = v.add_subparsers(dest="vault_command", required=True)
    e = vsub.add_parser(
        "encrypt-string",
        help="encrypt stdin as an inline `!vault |` value",
        epilog="the password: ROCMFLEET_VAULT_PASSWORD_FILE or ANSIBLE_VAULT_PASSWORD_FILE (a file, or an executable "
        "that prints it). exit status: 0 printed; 2 no password configured or an empty value",
    )
    e.add_argument("name", help="the YAML key to print, e.g. HF_TOKEN")
    e.set_defaults(func=_encrypt_string)
    r = vsub.add_parser(
        "rekey",
        help="re-encrypt files with a new password",
        epilog="exit status: 0 every file rekeyed; 2 none was (every file or none)",
    )
    r.add_argument("--new-password-file", required=True)
    r.add_argument("files", nargs="+", help="group files with inline `!vault |` values, or wholly encrypted")
    r.set_defaults(func=_rekey)
    s = sub.add_parser("schema", help="print the JSON Schema of host data", epilog="exit status: 0")
    s.set_defaults(func=_schema)
    for action in (a for _name, c in commands(parser, "rocmfleet") for a in c._actions):
        if isinstance(action, argparse._SubParsersAction) and action.metavar is None:
            # argparse's "required" error names an action by metavar, else dest: a group without its command
            # then says "required: {targets}" (its choices, as its usage line shows them), not "metrics_command"
            action.metavar = "{" + ",".join(action.choices) + "}"
    for _name, command in commands(parser, "rocmfleet"):
        if command is not parser and command._subparsers is None:  # -v also after the command, as pyinfra's
            command.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help=verbose_help)
    return parser


def commands(parser: argparse.ArgumentParser, prefix: str) -> list[tuple[str, argparse.ArgumentParser]]:
    """``(name, parser)`` of ``parser`` and every command under it, depth first (``rocmfleet cache``,
    then ``rocmfleet cache bake``); a command that runs has no ``_subparsers``."""
    found = [(prefix, parser)]
    for action in parser._actions:  # argparse has no public walk of its subparsers
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += commands(sub, f"{prefix} {name}")
    return found


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rocmfleet`` console script; returns the exit status."""
    import argcomplete

    parser = build_parser()
    argcomplete.autocomplete(parser)  # answers a shell's completion request and exits; else nothing
    args = parser.parse_args(argv)
    command: Callable[[argparse.Namespace], int] = args.func
    try:
        if args.verbose:
            from rocmfleet.fleet.connect import told_commands

            with told_commands(lambda line: print(line, file=sys.stderr, flush=True)):
                return command(args)
        return command(args)
    except KeyboardInterrupt:
        print(f"\nrocmfleet: {args.command}: interrupted; {_INTERRUPTED.get(args.command, 'nothing more was done')}",
              file=sys.stderr)  # fmt: skip
        return 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C


#: What an interrupted command left, said after Ctrl-C instead of a traceback.
_INTERRUPTED = {
    "rollout": "the state file records how far it got: `rocmfleet status` shows the hosts, "
    "`rocmfleet rollout INVENTORY --resume` continues it and `--rollback` returns the switched hosts",
    "restart": "the state file records how far it got: `rocmfleet restart INVENTORY --resume` finishes it",
    "cache": "the bake starts the host's instance again on its way out: "
    "`rocmfleet status INVENTORY --limit HOST` shows whether it serves",
    "check": "no report was written",
    "bench": "the results of the hosts that finished are in the results directory",
}


if __name__ == "__main__":
    sys.exit(main())
