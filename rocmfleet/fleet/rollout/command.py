"""``rocmfleet rollout`` and ``restart``: plan, record and run one, or ``--resume``/``--rollback`` the recorded one.

:func:`run_rollout` checks the options, reads what every host runs, runs the preflight check,
pins the image in the group data (``--image``), writes the state file and hands it to the
:class:`~rocmfleet.fleet.rollout.runner.Runner` with :class:`~rocmfleet.fleet.rollout.hoststeps.HostSteps`.
Every end prints its summary (the report and the state file; each failed host's error) and
returns an exit status; nothing a host does raises out of it.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rocmfleet.config.groupdata_edit import IMAGE_KEYS, parse, unified_diff
from rocmfleet.config.validate import placeholder_warning
from rocmfleet.domain.soak import format_duration
from rocmfleet.fleet.bench import benchrun
from rocmfleet.fleet.bench.runs import new_run_id
from rocmfleet.fleet.check import compliance
from rocmfleet.fleet.rollout import fleetimage, hoststeps, rolloutplan, targetimage
from rocmfleet.fleet.rollout.batches import PlanError
from rocmfleet.fleet.rollout.fleetimage import CommandError
from rocmfleet.fleet.rollout.hoststeps import CHECK_TIMEOUT_S
from rocmfleet.fleet.rollout.instancestatus import InstanceStatus, running_image
from rocmfleet.fleet.rollout.progress import Emit, LineProgress, Progress, ProgressFactory, to_stderr
from rocmfleet.fleet.rollout.report import markdown_report
from rocmfleet.fleet.rollout.rolloutplan import Groups as Groups
from rocmfleet.fleet.rollout.runner import Runner
from rocmfleet.fleet.rollout.soakmetrics import MetricsSoak
from rocmfleet.fleet.rollout.soakmetrics import prometheus_url as prometheus_url
from rocmfleet.fleet.rollout.state import (
    DataEdit,
    HostState,
    ImageRef,
    Kind,
    RolloutState,
    RunLocked,
    ServiceBound,
    SoakPlan,
    deploy_refusal,
    load_state,
    results_root,
    run_lock,
    save_state,
    state_path,
)
from rocmfleet.fleet.rollout.steps import RETRIES, StepError, step_failure
from rocmfleet.fleet.target import parallel
from rocmfleet.plan.model import RolloutPlan


@dataclass(frozen=True)
class Fleet:
    """What ``cli/rollout.py`` gives the rollout: ``load(inventory, limit) -> {name: Target}`` in inventory order
    (:func:`rocmfleet.fleet.inventory.load_targets`; only the commands load an inventory), and ``planning``, how the
    preflight and the gates read a host's facts and plan it (:class:`rocmfleet.fleet.check.hostplan.HostPlanning`)."""

    load: Callable[[str, list[str] | None], hoststeps.HostTargets]
    planning: compliance.Planning


@dataclass(frozen=True)
class StartOptions:
    """How a new rollout or restart starts (``--dry``, ``-y``).

    Attributes:
        dry: show the plan (the image's digest, the group file's edit, the batches) after the
            preflight check, and change nothing: no group file, no state file, no host.
        confirm: asked with the plan's one-line summary before anything changes; False stops
            with nothing changed. None: no question (``-y``, or no terminal to ask on).
        on_plan: with ``dry``, told the plan (``rollout --dry --json`` prints it), the object
            ``rocmfleet plan --image --json`` prints as its ``rollout``.
    """

    dry: bool = False
    confirm: Callable[[str], bool] | None = None
    on_plan: Callable[[RolloutPlan], None] | None = None


def _finish(state: RolloutState, path: Path, code: int, emit: Emit, error: Emit = to_stderr) -> int:
    """Write the report; each host's error and a failed end go to ``error``, a good end to ``emit``."""
    report = path.parent / state.id / "report.md"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(markdown_report(state))
    for name, host in state.hosts.items():
        if host.error:
            error(f"{name}: {host.step}: {host.error}")
    (error if code else emit)(f"{state.kind} {state.id}: {state.status}; report {report}; state {path}")
    return code


def run_rollout(
    inventory: str,
    kind: str = "rollout",
    image: str | None = None,
    canary: int | None = None,
    max_unavailable: str | None = None,
    force: bool = False,
    resume: bool = False,
    rollback: bool = False,
    limit: list[str] | None = None,
    results_dir: str | None = None,
    emit: Emit = print,
    progress_factory: ProgressFactory | None = None,
    error: Emit | None = None,
    start: StartOptions = StartOptions(),  # noqa: B008 - frozen, never mutated
    retries: int | None = None,
    soak: SoakPlan | None = None,
    groups: Groups = Groups(),  # noqa: B008 - frozen, never mutated
    *,
    fleet: Fleet,
) -> int:
    """``rocmfleet rollout``/``restart``: plan, record and run, or ``--resume``/``--rollback`` one.

    Args:
        fleet: the hosts' loader and planning (:class:`Fleet`), given by the command.
        canary, max_unavailable: ``--canary`` (replicas of each service, default 1) and
            ``--max-unavailable`` (replicas of each service, a count or a percentage of its
            replicas; default ``"1"``); ``None``: not given (:mod:`rocmfleet.fleet.rollout.batches`).
        groups: ``--canary-group`` and ``--group`` (:class:`Groups`).
        emit: where progress and the report's summary go (stdout).
        error: where errors go (default stderr): why nothing started, each failed host's error,
            a failed end.
        retries: ``--retries``, retries of an inconclusive step before the run pauses
            (:data:`~rocmfleet.fleet.rollout.steps.RETRIES` when ``None``).
        soak: ``--soak DURATION [--soak-batches]`` (:mod:`rocmfleet.fleet.rollout.soak`); with
            ``resume`` it replaces the soak recorded in the state (``None``: the recorded one).

    With ``resume`` or ``rollback`` the recorded plan is what runs: ``image``, ``canary``,
    ``max_unavailable``, ``limit`` and ``force`` are refused (exit 2) rather than ignored.

    Returns:
        0 done (or rolled back on request); 1 a host failed (rolled back: see the report; a
        restart leaves it drained); 3 paused (a gate could not judge the image after its retries:
        nothing rolled back, ``--resume`` continues); 2 nothing was started (bad options, a failing fleet without
        ``--force``, a recorded rollout, a state file that is not consistent, an unreadable registry).
    """
    say_error = error or to_stderr
    if kind not in ("rollout", "restart"):
        say_error(f"rocmfleet: {kind}: not a rollout or a restart")
        return 2
    checked: Kind = "rollout" if kind == "rollout" else "restart"
    root = results_root(results_dir, inventory)
    path = state_path(root, inventory)
    # A new rollout's --dry changes nothing: it takes no lock (which would leave the results
    # directory and the lock file behind); a recorded one's --resume/--rollback always does.
    dry_only = start.dry and not (resume or rollback)
    try:
        with contextlib.nullcontext() if dry_only else run_lock(path):
            return _run_rollout(
                inventory, checked, image, canary, max_unavailable, force, resume, rollback, limit, root, path,
                emit, progress_factory, say_error, start, RETRIES if retries is None else retries, soak, groups,
                fleet=fleet,
            )  # fmt: skip
    except RunLocked as exc:
        say_error(f"rocmfleet: {exc}; nothing was done")
        return 2


def _run_rollout(
    inventory: str, kind: Kind, image: str | None, canary: int | None, max_unavailable: str | None, force: bool,
    resume: bool, rollback: bool, limit: list[str] | None, root: Path, path: Path, emit: Emit,
    progress_factory: ProgressFactory | None, say_error: Emit, start: StartOptions = StartOptions(),  # noqa: B008
    retries: int = RETRIES, soak: SoakPlan | None = None, groups: Groups = Groups(),  # noqa: B008
    *, fleet: Fleet,
) -> int:  # fmt: skip
    """:func:`run_rollout` with its run lock held; ``root`` and ``path``: the results root and state file."""
    try:
        if soak is not None and kind == "restart":
            raise CommandError(
                "--soak with restart: a soak compares a new image with the old one; a restart changes no image"
            )
        if soak is not None and rollback:
            raise CommandError("--soak with --rollback: a rollback returns every switched host, it soaks none")
        if start.dry and (resume or rollback):
            raise CommandError(f"--dry with {'--resume' if resume else '--rollback'}: --dry plans a new {kind}")
        if resume or rollback:
            given = {
                "--image": image,
                "--canary": canary,
                "--max-unavailable": max_unavailable,
                "--limit": ",".join(limit) if limit else None,
                "--force": True if force else None,
                "--canary-group": groups.canary,
                "--group": groups.pin,
            }
            extra = [name if value is True else f"{name} {value}" for name, value in given.items() if value is not None]
            if extra:
                mode = "--resume" if resume else "--rollback"
                raise CommandError(
                    f"{mode} with {', '.join(extra)}: {mode} runs the plan recorded in {path} (its hosts, batches, "
                    f"canary, max-unavailable and image); give {mode} alone, or finish this {kind} and start a new one"
                )
        existing = load_state(path)
        if resume or rollback:
            if existing is None:
                raise CommandError(f"no {kind} of {inventory} recorded in {path}")
            if existing.kind != kind:
                raise CommandError(
                    f"{path} records {existing.kind} {existing.id}, not a {kind}: "
                    f"use `rocmfleet {existing.kind} {inventory} {'--resume' if resume else '--rollback'}`"
                )
            if soak is not None:
                _resoak(existing, soak, path, emit)
            return _continue(existing, path, inventory, fleet, rollback, emit, progress_factory, say_error, retries)
        if existing is not None and existing.blocking:
            raise CommandError(deploy_refusal(inventory, root) or f"{path}: a rollout is recorded")
        return _start(
            inventory, kind, image, canary, "1" if max_unavailable is None else max_unavailable, force, limit, root,
            path, emit, progress_factory, say_error, start, retries, soak, groups, fleet=fleet,
        )  # fmt: skip
    except (CommandError, PlanError, ValueError) as exc:
        say_error(f"rocmfleet: {exc}")
        return 2


def _resoak(state: RolloutState, soak: SoakPlan, path: Path, emit: Emit) -> None:
    """``--resume --soak``: the resumed rollout soaks as now asked (recorded in its state).

    Raises:
        CommandError: the rollout has no canary and ``--soak-batches`` is not given.
    """
    if not soak.every_batch and state.canary_batch_count() == 0:
        raise CommandError(_NO_CANARY)
    was = state.soak
    state.soak = soak
    save_state(state, path)
    before = "no soak" if was is None else _soak_words(was)
    emit(f"soak: {_soak_words(soak)} from now on (was: {before}); recorded in {path}")


_NO_CANARY = (
    "--soak without --soak-batches soaks the canary, and this rollout has none (--canary 0); "
    "add --soak-batches to soak every batch, or give --canary"
)


def _soak_words(soak: SoakPlan) -> str:
    return f"{'every batch' if soak.every_batch else 'the canary'} for {format_duration(soak.duration_s)}"


def _runner(
    state: RolloutState,
    path: Path,
    targets: hoststeps.HostTargets,
    inventory: str,
    planning: compliance.Planning,
    emit: Emit,
    progress_factory: ProgressFactory | None,
    error: Emit = to_stderr,
    retries: int = RETRIES,
) -> tuple[Runner, Progress]:
    log = path.parent / state.id / "log.txt"
    log.parent.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()

    def to_log(line: str) -> None:
        with lock, open(log, "a", encoding="utf-8") as out:
            out.write(line + "\n")

    steps = hoststeps.HostSteps(
        inventory, targets, path.parent / state.id, state.id, emit=to_log,
        check=functools.partial(compliance.vllm_failures, planning=planning), bench=benchrun.gate_results,
    )  # fmt: skip
    revert = fleetimage.revert_data(state.data_edit, emit, error) if state.data_edit else None
    progress = progress_factory(len(state.hosts)) if progress_factory else LineProgress(emit)
    url = prometheus_url(targets) if state.soak is not None else None
    soak = MetricsSoak(steps, url) if state.soak is not None else None
    runner = Runner(state, path, steps, progress, on_data_revert=revert, retries=retries, soak=soak, soak_source=url)
    return runner, progress


def _drive(progress: Progress, action: Callable[[], int]) -> int:
    """``action()``, inside ``progress`` when it is a context manager
    (:class:`~rocmfleet.fleet.rollout.progress.RichProgress`)."""
    if isinstance(progress, contextlib.AbstractContextManager):
        with progress:
            return action()
    return action()


def _continue(
    state: RolloutState,
    path: Path,
    inventory: str,
    fleet: Fleet,
    rollback: bool,
    emit: Emit,
    progress_factory: ProgressFactory | None,
    error: Emit = to_stderr,
    retries: int = RETRIES,
) -> int:
    if rollback and state.kind == "restart":
        raise CommandError(
            f"restart {state.id} ({state.status}) changes no image: nothing to roll back; "
            f"`rocmfleet restart {inventory} --resume` finishes it (a failed host is restarted and gated again)"
        )
    targets = fleet.load(inventory, None)
    missing = sorted(set(state.hosts) - set(targets))
    if missing:
        raise CommandError(f"hosts of rollout {state.id} are no longer in {inventory}: {', '.join(missing)}")
    targets = {name: targets[name] for name in state.hosts}
    if state.kind == "rollout" and state.target is not None and not rollback:
        targets = {name: targetimage.with_image(t, state.target) for name, t in targets.items()}
    runner, progress = _runner(state, path, targets, inventory, fleet.planning, emit, progress_factory, error, retries)
    if rollback:
        code = _drive(progress, lambda: runner.roll_back(None))
    elif state.status == "running":
        code = _drive(progress, runner.run)
    elif state.status == "paused":
        runner.resume_paused()
        code = _drive(progress, runner.run)
    elif state.kind == "restart" and state.status == "failed":
        runner.retry_failed()
        code = _drive(progress, runner.run)
    elif state.status in ("failed", "rollback_failed"):
        code = _drive(progress, lambda: runner.roll_back(state.failure or "resumed rollback"))
    else:
        emit(f"{state.kind} {state.id} is {state.status}: nothing to resume")
        return 0
    return _finish(state, path, code, emit, error)


def _start(
    inventory: str, kind: Kind, image: str | None, canary: int | None, max_unavailable: str, force: bool,
    limit: list[str] | None, root: Path, path: Path, emit: Emit, progress_factory: ProgressFactory | None,
    error: Emit = to_stderr, start: StartOptions = StartOptions(),  # noqa: B008
    retries: int = RETRIES, soak: SoakPlan | None = None, groups: Groups = Groups(),  # noqa: B008
    *, fleet: Fleet,
) -> int:  # fmt: skip
    targets = fleet.load(inventory, limit)
    replicas = rolloutplan.host_replicas(targets)
    # Counts no service can hold are typos (--canary 10 for 3 replicas); refused before any connection.
    covered = rolloutplan.scope(
        kind, inventory, replicas, {n: t.groups for n, t in targets.items()}, image, canary, max_unavailable, groups,
        {n: t.config.image for n, t in targets.items()}, emit,
    )  # fmt: skip
    scope, canary_hosts, count = covered.hosts, covered.canary_hosts, covered.count
    if soak is not None and count == 0 and not soak.every_batch:
        raise CommandError(_NO_CANARY)
    if soak is not None and not soak.every_batch and scope and canary_hosts and set(scope) <= set(canary_hosts):
        raise CommandError(
            f"--soak compares the canary with the hosts not yet switched, and the canary is every host of this "
            f"rollout ({len(scope)}): nothing is left to compare with; give a smaller --canary or --canary-group"
        )
    if soak is not None:
        prometheus_url(targets)  # one source for the soak, refused before any connection
    unconfirmed: list[str] = []  # what --dry could not confirm
    wanted_ref = None
    if image:
        try:
            wanted_ref = targetimage.resolve(image, targets)
            emit(f"{image} is {wanted_ref.digest} (resolved once; every host gets this digest)")
        except fleetimage.Unconfirmed as exc:
            if not start.dry:
                raise
            wanted_ref = fleetimage.unconfirmed_ref(image)
            unconfirmed.append(f"digest of {image} not confirmed: {exc.why}")
    edit = fleetimage.data_file(wanted_ref, groups.pin) if wanted_ref is not None else None
    observer = hoststeps.HostSteps(inventory, targets, root, "observe")

    def observe(name: str) -> tuple[str, list[InstanceStatus], str | None]:
        try:
            return name, observer.observe(name)[1], None
        except Exception as exc:  # noqa: BLE001 - a failure on one host is reported, not raised
            return name, [], step_failure(exc) if isinstance(exc, StepError) else f"{name}: {step_failure(exc)}"

    before: dict[str, ImageRef] = {}
    problems = []
    # `unknown`, not `error`: that name is the callback this function reports with (issue 24)
    for name, instances, unknown in parallel(observe, scope):
        ref, why = (None, None) if unknown else running_image(instances)
        if unknown:
            problems.append(unknown)
        elif ref is None:
            problems.append(f"{name}: {why}")
        else:
            before[name] = ref
    if problems and not start.dry:
        raise CommandError("cannot start: what these hosts run is unknown (deploy them first): " + "; ".join(problems))
    unconfirmed += [f"what it runs not confirmed: {p}" for p in problems]
    wanted: dict[str, ImageRef] = {}
    for name in scope:
        img = targets[name].config.image
        wanted[name] = wanted_ref or ImageRef(repository=img.repository, tag=img.tag, digest=img.digest)
    if kind == "restart":
        hosts = list(scope)
        target = None
    else:  # a host whose image is not confirmed (--dry) is planned as switching
        hosts = [n for n in scope if n not in before or wanted[n].digest != before[n].digest]
        said = fleetimage.image_lines({n: wanted[n] for n in hosts}, {n: targets[n].groups for n in hosts})
        if len(said) > 1:
            raise CommandError(
                f"the hosts want different images ({'; '.join(s.removeprefix('image: ') for s in said)}); roll out "
                "one at a time with --limit GROUP, or pin one group's image with --image REF --group NAME"
            )
        target = wanted[hosts[0]] if hosts else wanted_ref
        if image is None:  # which image the data pins, and where: no --image names it
            for line in said:
                emit(f"{line} (no --image: the image the group data pins)")
        if not hosts:
            emit(f"every host already runs {target.reference if target else 'what the data says'}: nothing to roll out")
            if not wanted_ref:
                return 0
    if image is None and (warning := placeholder_warning({n: targets[n].config for n in hosts})):
        error(f"rocmfleet: warning: {warning}")  # as the deploy's own inventory load warns
    checked = [n for n in hosts if n in before]
    unread = f" ({len(hosts) - len(checked)} not reached: not checked)" if len(checked) < len(hosts) else ""
    emit(f"preflight: rocmfleet check --select gpu,vllm on {len(checked)} host(s){unread}")
    current = [targetimage.with_image(targets[n], before[n]) for n in checked]
    modules = list(compliance.GATE_MODULES)
    results = compliance.run_fleet(current, modules, CHECK_TIMEOUT_S, planning=fleet.planning) if current else []
    failing = [compliance.line(r) for r in results if r.outcome not in ("passed", "skipped")]
    if failing:
        for line in failing:
            error(line)
        if start.dry and not force:
            unconfirmed.append(f"{len(failing)} check(s) fail on the fleet: a start would be refused without --force")
        elif not force:
            raise CommandError(f"{len(failing)} check(s) fail on the fleet before the {kind}; fix them or pass --force")
        else:
            emit("--force: starting on a failing fleet")
    if edit is not None and edit[2] != edit[1]:
        emit(unified_diff(edit[1], edit[2], str(edit[0])))
    planned = rolloutplan.plan(hosts, replicas, max_unavailable, count, canary_hosts)
    batches = planned.batches
    summary = f"{kind} of {rolloutplan.counted(planned, len(hosts))}"
    shown = rolloutplan.lines(planned, replicas, count, groups.canary) if batches else []
    for line in shown:
        emit(line)
    if batches and soak is not None:
        emit(f"soak: {_soak_words(soak)}, in service on the new image, then compared with the hosts not yet "
             "switched")  # fmt: skip
    if start.dry:
        for line in unconfirmed:
            emit(f"--dry: {line}")
        emit(f"--dry: {summary if hosts else 'no host to switch'}; nothing was changed")
        if start.on_plan is not None:
            ref = target or (wanted[hosts[0]] if hosts else None)  # a restart's: the hosts' own image
            pin = str(edit[0]) if edit is not None else ""
            shown_image = (image or (ref.reference if ref else ""), ref.digest if ref else "")
            said = [*shown, *(f"--dry: {line}" for line in unconfirmed), summary]  # what it could not confirm too
            start.on_plan(rolloutplan.as_plan(planned, hosts, shown_image, groups, pin, count, said))
        return 0
    if start.confirm is not None and not start.confirm(f"start this {summary}?"):
        raise CommandError("not confirmed; nothing was changed")
    data_edit = None
    if wanted_ref is not None and edit is not None:
        file, old, new = edit
        if new != old:
            file.write_text(new)
            previous = parse(old, str(file))
            data_edit = DataEdit(
                path=str(file),
                before={k: (str(previous[k]) if k in previous else None) for k in IMAGE_KEYS},
                after=wanted_ref.data(),
            )
        reloaded = fleet.load(inventory, limit)
        wrong = [n for n in scope if reloaded[n].config.image.digest != wanted_ref.digest]
        if wrong:
            if data_edit is not None:
                file.write_text(old)
            raise CommandError(
                f"{file} now pins {wanted_ref.digest}, but {', '.join(wrong)} still get another image from data that "
                f"wins over it (host data or the inventory file); {file} was put back"
            )
        targets = reloaded
        if not hosts:
            return 0
    index = {h: i for i, batch in enumerate(batches) for h in batch}
    state = RolloutState(
        id=new_run_id(),
        kind=kind,
        inventory=inventory,
        target=target,
        canary=count,
        canary_group=groups.canary,
        canary_batches=planned.canary_batches,
        max_unavailable=max((len(b) for b in batches), default=1),
        services={s: ServiceBound(replicas=planned.totals[s], max_unavailable=n) for s, n in planned.bounds.items()},
        batches=batches,
        hosts={
            h: HostState(batch=index[h], before=before[h], after=target or before[h], replicas=replicas[h])
            for h in hosts
        },
        data_edit=data_edit,
        soak=soak,
    )
    save_state(state, path)
    emit(f"{kind} {state.id}: {rolloutplan.counted(planned, len(hosts))}; state {path}")
    runner, progress = _runner(
        state, path, {h: targets[h] for h in hosts}, inventory, fleet.planning, emit, progress_factory, error, retries
    )
    return _finish(state, path, _drive(progress, runner.run), emit, error)
