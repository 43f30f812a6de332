"""``rocmfleet rollout --bake`` (rocmfleet/fleet/rollout/bake.py) with stand-in steps: the bake runs on the
canary from the base image, and the rollout gets the baked image; failures stop before the rollout."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from rocmfleet.fleet.cache.cachebake import BakeError
from rocmfleet.fleet.rollout import state as rstate
from rocmfleet.fleet.rollout.bake import BakeSteps, bake_and_roll
from rocmfleet.fleet.rollout.fleetimage import CommandError

BASE = rstate.ImageRef(repository="reg:5000/vllm", tag="lab.2", digest="sha256:" + "b" * 64)
BAKED_TAG = "lab.2-rfcache-0123456789ab"
BAKED_DIGEST = "sha256:" + "c" * 64


@dataclass(frozen=True)
class Img:
    repository: str
    tag: str
    digest: str

    @property
    def reference(self) -> str:
        return f"{self.repository}:{self.tag}@{self.digest}"


@dataclass(frozen=True)
class Config:
    image: Img


@dataclass(frozen=True)
class Target:
    name: str
    config: Config


@dataclass(frozen=True)
class Key:
    short: str = "0123456789ab"


@dataclass(frozen=True)
class Manifest:
    files: int = 7


@dataclass(frozen=True)
class Baked:
    repository: str
    tag: str
    digest: str
    key: Key = Key()
    manifest: Manifest = Manifest()

    @property
    def reference(self) -> str:
        return f"{self.repository}:{self.tag}@{self.digest}"


def _steps(calls, tag="lab.1", bake_error=None, registry_digest=BAKED_DIGEST):
    hosts = ["lab-0", "lab-1", "lab-2"]
    targets = {h: Target(h, Config(Img("reg:5000/vllm", tag, "sha256:" + "a" * 64))) for h in hosts}

    def load(inventory, limit):
        calls.append(("load", inventory, limit))
        return targets

    def resolve(reference, found):
        calls.append(("resolve", reference))
        if reference.endswith(BAKED_TAG):
            return rstate.ImageRef(repository="reg:5000/vllm", tag=BAKED_TAG, digest=registry_digest)
        if reference != "reg:5000/vllm:lab.2":
            raise CommandError(f"cannot resolve {reference}")
        return BASE

    def with_image(target, image):
        return replace(target, config=Config(Img(image.repository, image.tag, image.digest)))

    def bake(target, emit):
        calls.append(("bake", target.name, target.config.image.reference))
        if bake_error:
            raise bake_error
        return Baked("reg:5000/vllm", BAKED_TAG, BAKED_DIGEST)

    def rollout(inventory, **options):
        calls.append(("rollout", inventory, options["image"], options["canary"], options.get("max_unavailable")))
        return 0

    return BakeSteps(load, resolve, with_image, bake, rollout)


def test_bakes_on_the_canary_from_the_base_then_rolls_the_baked_image():
    calls, lines = [], []
    code = bake_and_roll(
        "inv.py",
        "reg:5000/vllm:lab.2",
        canary=1,
        emit=lines.append,
        error=lines.append,
        steps=_steps(calls),
        max_unavailable="2",
    )
    assert code == 0, lines
    assert ("bake", "lab-0", BASE.reference) in calls
    assert calls[-1] == ("rollout", "inv.py", f"reg:5000/vllm:{BAKED_TAG}", 1, "2")
    assert [c[0] for c in calls] == ["load", "resolve", "bake", "resolve", "rollout"]


def test_without_image_the_pinned_base_is_baked():
    calls = []
    assert bake_and_roll("inv.py", None, emit=lambda _line: None, steps=_steps(calls)) == 0
    assert calls[1] == ("bake", "lab-0", "reg:5000/vllm:lab.1@sha256:" + "a" * 64)


def test_a_failed_bake_rolls_nothing():
    calls, lines = [], []
    code = bake_and_roll(
        "inv.py",
        None,
        emit=lines.append,
        error=lines.append,
        steps=_steps(calls, bake_error=BakeError("lab-0: warm-up")),
    )
    assert code == 1
    assert not [c for c in calls if c[0] == "rollout"]
    assert "nothing rolled out" in lines[-1] and "warm-up" in lines[-1]


def test_a_baked_base_and_no_canary_are_refused_before_any_bake():
    calls, lines = [], []
    assert bake_and_roll("inv.py", None, emit=lines.append, error=lines.append, steps=_steps(calls, tag=BAKED_TAG)) == 2
    assert "itself a baked image" in lines[-1] and "--image" in lines[-1]
    assert bake_and_roll("inv.py", None, canary=0, emit=lines.append, error=lines.append, steps=_steps(calls)) == 2
    assert "--canary 0" in lines[-1]
    assert not [c for c in calls if c[0] in ("bake", "rollout")]


def test_a_registry_digest_other_than_the_pushed_one_stops_the_rollout():
    calls, lines = [], []
    steps = _steps(calls, registry_digest="sha256:" + "d" * 64)
    assert bake_and_roll("inv.py", None, emit=lines.append, error=lines.append, steps=steps) == 2
    assert "the bake pushed" in lines[-1]
    assert not [c for c in calls if c[0] == "rollout"]


def test_the_cli_flag_calls_bake_and_roll_with_the_rollout_options(monkeypatch, capsys):
    from rocmfleet import entry
    from rocmfleet.fleet.rollout import bake

    seen = []
    monkeypatch.setattr(bake, "bake_and_roll", lambda *a, **kw: seen.append((a, kw)) or 0)
    argv = ["rollout", "inv.py", "--bake", "--image", "reg:5000/vllm:lab.2", "--canary", "2", "--max-unavailable", "3"]
    # no terminal to ask on (pytest's stdin): refused before the bake touches the canary, unless -y
    assert entry.main(argv) == 2 and seen == []
    assert "not a terminal to ask on: pass -y" in capsys.readouterr().err
    assert entry.main([*argv, "-y"]) == 0
    ((args, options),) = seen
    assert args == ("inv.py", "reg:5000/vllm:lab.2") and options["canary"] == 2
    assert options["max_unavailable"] == "3" and options["force"] is False
    assert entry.main(["rollout", "inv.py", "--bake", "--resume"]) == 2
    assert "--bake starts a new rollout" in capsys.readouterr().err
    assert entry.main(["rollout", "inv.py", "--bake", "--dry", "-y"]) == 2 and len(seen) == 1  # nothing baked
    assert "--dry with --bake" in capsys.readouterr().err


def test_a_recorded_rollout_refuses_the_bake_before_it_stops_the_canary(tmp_path, monkeypatch):
    from tests.unit.test_rollout_state import _state

    monkeypatch.delenv(rstate.OWN_DEPLOY_ENV, raising=False)
    rstate.save_state(_state(), rstate.state_path(tmp_path, "inv.py"))
    calls, lines = [], []
    steps = _steps(calls)
    assert bake_and_roll("inv.py", None, emit=lines.append, error=lines.append, steps=steps, results_dir=tmp_path) == 2
    assert "is recorded as running" in lines[-1] and "--resume" in lines[-1]
    assert not [c for c in calls if c[0] in ("bake", "rollout")]


def test_bake_with_limit_and_cache_bake_during_a_rollout_are_refused(tmp_path, monkeypatch, capsys):
    from rocmfleet import entry
    from rocmfleet.fleet import inventory as fleet
    from rocmfleet.fleet.cache import cachebake
    from tests.unit.test_rollout_state import _state

    assert entry.main(["rollout", "inv.py", "--bake", "--limit", "lab-1"]) == 2
    assert "--bake with --limit" in capsys.readouterr().err
    monkeypatch.delenv(rstate.OWN_DEPLOY_ENV, raising=False)
    monkeypatch.setenv(rstate.RESULTS_ENV, str(tmp_path))
    rstate.save_state(_state(), rstate.state_path(tmp_path, "inv.py"))
    monkeypatch.setattr(fleet, "load_fleet", lambda inventory, limit, **_: ["lab-1"])
    baked = []
    monkeypatch.setattr(cachebake, "bake", lambda *a, **kw: baked.append(a))
    assert entry.main(["cache", "bake", "inv.py", "--host", "lab-1"]) == 2
    assert "is recorded as running" in capsys.readouterr().err and not baked


@pytest.mark.parametrize("command", ["check", "bench", "rollout", "restart", "status"])
@pytest.mark.parametrize("limit", ["--limit=", "--limit=,", "--limit= , "])
def test_an_empty_limit_is_refused_not_every_host(command, limit, capsys):
    from rocmfleet import entry

    with pytest.raises(SystemExit) as exited:
        entry.main([command, "inv.py", limit])
    assert exited.value.code == 2
    assert "names no host" in capsys.readouterr().err


def test_a_bad_max_unavailable_is_refused_before_the_bake():
    calls, lines = [], []
    steps = _steps(calls)
    assert bake_and_roll("inv.py", None, emit=lines.append, error=lines.append, steps=steps, max_unavailable="0") == 2
    assert "--max-unavailable 0" in lines[-1]
    assert not [c for c in calls if c[0] in ("bake", "rollout")]
