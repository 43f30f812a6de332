"""Proof of a baked cache hit: strict load mode, cache-proof.sh, the judgement, the check, the gate."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import replace
from types import SimpleNamespace

import pytest

from rocmfleet import scripts
from rocmfleet.config.settings import host_config
from rocmfleet.domain import cachedirs, cachekey, cacheproof, vllm
from rocmfleet.domain.tooloutput import CannotCheck
from rocmfleet.facts.vllm import CacheProof
from rocmfleet.fleet.check import compliance
from rocmfleet.fleet.check import test_cache as cache_checks
from rocmfleet.plan.build import plan_host
from rocmfleet.plan.instance import vllm_settings

STARTED = "2026-12-04T20:25:04.123456789Z"
BAKED_TAG = cachedirs.baked_tag("0.32.0-lab.1", "0123456789ab")


# --- strict load mode ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "env", "wanted"),
    [
        ("0.33.0", {}, {"VLLM_FORCE_AOT_LOAD": "1"}),
        ("0.14.0", {"VLLM_USE_AOT_COMPILE": "1"}, {"VLLM_FORCE_AOT_LOAD": "1"}),
        ("0.13.0", {}, {}),  # before the first release known to have it
        ("0.33.0", {"VLLM_USE_AOT_COMPILE": "0"}, {}),  # vLLM ignores it with AOT compile off
        ("0.33.0", {"VLLM_DISABLE_COMPILE_CACHE": "1"}, {}),
        ("0.33.0", {"VLLM_FORCE_AOT_LOAD": "0"}, {}),  # the operator's value stays
    ],
)
def test_strict_env(version, env, wanted):
    assert cacheproof.strict_env(version, env) == wanted


def _config(lab_data, tag, version, aot):
    """The lab's host data on image ``tag``, its profile at vLLM ``version`` with ``VLLM_USE_AOT_COMPILE=aot``
    (``None``: unset, vLLM's default)."""
    config = host_config(dict(lab_data, vllm_image_tag=tag))
    extra = {k: v for k, v in config.profile.extra_env.items() if k != "VLLM_USE_AOT_COMPILE"}
    if aot is not None:
        extra["VLLM_USE_AOT_COMPILE"] = aot
    return replace(config, profile=config.profile.model_copy(update={"vllm_version": version, "extra_env": extra}))


def test_a_baked_image_starts_in_strict_mode_where_its_vllm_has_one(lab_data, lab_placements):
    name = next(iter(lab_placements))
    for tag, version, aot, strict in (
        (BAKED_TAG, "0.33.0", None, "1"),
        (BAKED_TAG, "0.33.0", "0", None),  # the lab's profile turns AOT compile off
        (BAKED_TAG, "0.13.0", None, None),
        ("0.32.0-lab.1", "0.33.0", None, None),  # an unbaked image's first start must compile
    ):
        config = _config(lab_data, tag, version, aot)
        env = vllm.container_env(vllm_settings(config), lab_placements[name])
        assert env.get("VLLM_FORCE_AOT_LOAD") == strict, (tag, version, aot)


def test_the_lab_profile_keeps_aot_compile_off_so_no_strict_mode(lab_data, lab_placements):
    config = host_config(dict(lab_data, vllm_image_tag=BAKED_TAG))
    assert config.profile.extra_env.get("VLLM_USE_AOT_COMPILE") == "0"
    env = vllm.container_env(vllm_settings(config), lab_placements[next(iter(lab_placements))])
    assert "VLLM_FORCE_AOT_LOAD" not in env


def test_the_strict_switch_is_not_in_the_cache_key(lab_data):
    facts = cachekey.ImageFacts(base_digest="sha256:" + "ab" * 32, rocm_version="7.0.0", vllm_version="0.32.0")
    plain = cachekey.instance_key(host_config(lab_data), "gfx942", facts)
    strict = cachekey.instance_key(
        host_config(dict(lab_data, vllm_env={**lab_data.get("vllm_env", {}), "VLLM_FORCE_AOT_LOAD": "0"})),
        "gfx942",
        facts,
    )
    assert plain == strict


# --- the judgement, from recorded outputs --------------------------------------------------------

HIT = f"started\t{STARTED}\nend\n"
MISS = (
    f"started\t{STARTED}\n"
    "file\t/root/.triton/cache/AB/k1.hsaco\n"
    "file\t/root/.triton/cache/CD/k2.json\n"
    "file\t/root/.cache/inductor/fxgraph/ab/entry\n"
    "file\t/root/.cache/inductor/locks/x.lock\n"
    "file\t/root/.cache/vllm/modelinfos/llama.json\n"
    "file\t/root/.cache/vllm/torch_compile_cache/1a2b3c4d5e/rank_0_0/backbone/computation_graph.py\n"
    "log\t(EngineCore pid=7) INFO 12-04 20:26:01 [backends.py:399] Compiling a graph for compile range (1, 2048)"
    " takes 2.10 s\n"
    "end\n"
)


def test_a_hit_names_nothing():
    proof = cacheproof.parse(HIT)
    assert proof == cacheproof.Proof(started=STARTED)
    assert cacheproof.compiled(proof) == {} and cacheproof.miss_line("a", proof) is None


def test_a_miss_names_writers_counts_paths_and_vllm_words():
    proof = cacheproof.parse(MISS)
    assert cacheproof.compiled(proof) == {
        "TorchInductor": ["/root/.cache/inductor/fxgraph/ab/entry"],
        "Triton": ["/root/.triton/cache/AB/k1.hsaco", "/root/.triton/cache/CD/k2.json"],
        "vLLM torch.compile": [
            "/root/.cache/vllm/torch_compile_cache/1a2b3c4d5e/rank_0_0/backbone/computation_graph.py"
        ],
    }  # the lock file and vLLM's model info are no compiled code
    line = cacheproof.miss_line("lab-tiny-llama-0", proof)
    assert line is not None
    assert line.startswith(f"lab-tiny-llama-0: 4 file(s) compiled since the start of the baked container ({STARTED}): ")
    assert "Triton: 2 (/root/.triton/cache/AB/k1.hsaco, /root/.triton/cache/CD/k2.json)" in line
    assert "TorchInductor: 1 (/root/.cache/inductor/fxgraph/ab/entry)" in line
    assert line.endswith("; vLLM logged: 'Compiling a graph for compile range (1, 2048) takes 2.10 s'")


def test_a_miss_in_the_log_alone_is_a_miss_and_long_lists_are_cut():
    files = "".join(f"file\t/root/.aiter/jit/build/m{i}.so\n" for i in range(5))
    logs = "".join(
        f"log\tWARNING Compiling model again due to a load failure from /p{i}, reason: x\n" for i in range(4)
    )
    line = cacheproof.miss_line("a", cacheproof.parse(f"started\t{STARTED}\n{files}{logs}end\n"))
    assert line is not None
    assert (
        "AITER JIT: 5 (/root/.aiter/jit/build/m0.so, /root/.aiter/jit/build/m1.so, /root/.aiter/jit/build/m2.so, ...)"
        in line
    )
    assert line.endswith("'Compiling model again due to a load failure from /p2, reason: x' and 1 more")
    only_log = cacheproof.miss_line(
        "a", cacheproof.parse(f"started\t{STARTED}\nlog\tCannot load aot compilation from path /p\nend\n")
    )
    assert only_log is not None and "0 file(s)" in only_log and "Cannot load aot compilation" in only_log


def test_an_unreadable_proof_is_never_a_hit():
    with pytest.raises(ValueError, match="no 'end' line"):
        cacheproof.parse(f"started\t{STARTED}\nfile\t/root/.triton/cache/a\n")  # cut short
    with pytest.raises(ValueError, match="unknown kind"):
        cacheproof.parse("oops\tx\nend\n")
    proof = cacheproof.parse("problem\tcontainer vllm-a is not running\nend\n")
    with pytest.raises(ValueError, match="not running"):
        cacheproof.miss_line("a", proof)
    assert CacheProof().process(["started\tx"]).problem  # the deploy's fact: a problem, never a hit


def test_the_log_pattern_matches_every_compile_line_it_names():
    for pattern, source in cacheproof.COMPILE_LOG:
        assert re.search(cacheproof.COMPILE_LOG_GREP, pattern.replace("\\", "")), source
    assert not re.search(cacheproof.COMPILE_LOG_GREP, "Directly load the compiled graph(s) for compile range")


# --- cache-proof.sh, with a stand-in docker --------------------------------------------------------


def _stand_in_docker(tmp_path, inspect="true " + STARTED, inspect_rc=0, log="", find_error=""):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "log").write_text(log)
    # exec: run the container's command here (drop "exec CONTAINER"); a find error is one written to stderr.
    script = f"""#!/bin/sh
case "$1" in
inspect) echo '{inspect}'; exit {inspect_rc} ;;
exec) shift 2; [ -n '{find_error}' ] && {{ echo '{find_error}' >&2; exit 1; }}; exec "$@" ;;
logs) [ "$2" = --since ] && [ "$3" = '{STARTED}' ] || {{ echo "bad logs call: $*" >&2; exit 1; }}
      cat '{tmp_path / "log"}' ;;
*) echo "unexpected docker $*" >&2; exit 1 ;;
esac
"""
    (bin_dir / "docker").write_text(script)
    (bin_dir / "docker").chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin"}


def _caches(tmp_path):
    """Two cache dirs: old files (the baked layer's bake-time mtimes) and one written after the start."""
    triton, inductor = tmp_path / "triton", tmp_path / "inductor"
    for path in (triton / "AB" / "old.hsaco", inductor / "fx" / "old", triton / "CD" / "new.hsaco"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    before, after = 1796415904 - 3600, 1796415904 + 60  # 2026-12-04T20:25:04Z -/+
    for path in (triton / "AB" / "old.hsaco", inductor / "fx" / "old"):
        os.utime(path, (before, before))
    os.utime(triton / "CD" / "new.hsaco", (after, after))
    return [str(triton), str(inductor), str(tmp_path / "absent")]  # a path the container lacks is skipped


def _run(tmp_path, env, paths):
    command = scripts.command("cache-proof.sh", "vllm-a", cacheproof.COMPILE_LOG_GREP, *paths)
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, check=False)


def test_the_script_lists_files_newer_than_the_start_and_compile_log_lines(tmp_path):
    log = "INFO loading\r\nINFO Compiling a graph for compile range (1, 8) takes 1.0 s\r\nINFO Directly load\n"
    paths = _caches(tmp_path)
    result = _run(tmp_path, _stand_in_docker(tmp_path, log=log), paths)
    assert result.returncode == 0, result.stderr
    proof = cacheproof.parse(result.stdout)
    assert proof == cacheproof.Proof(
        started=STARTED,
        files=(f"{tmp_path}/triton/CD/new.hsaco",),
        logs=("INFO Compiling a graph for compile range (1, 8) takes 1.0 s",),
    )


def test_the_script_reports_what_it_cannot_read(tmp_path):
    stopped = _run(tmp_path, _stand_in_docker(tmp_path, inspect="false " + STARTED), [])
    assert cacheproof.parse(stopped.stdout).problem == "container vllm-a is not running"
    (tmp_path / "bin").rename(tmp_path / "bin0")
    absent = _run(tmp_path, _stand_in_docker(tmp_path, inspect="Error: No such container: vllm-a", inspect_rc=1), [])
    assert "No such container" in cacheproof.parse(absent.stdout).problem
    (tmp_path / "bin").rename(tmp_path / "bin1")
    broken = _run(tmp_path, _stand_in_docker(tmp_path, find_error="find: unknown predicate"), _caches(tmp_path))
    assert "find in vllm-a failed: find: unknown predicate" in cacheproof.parse(broken.stdout).problem


# --- the check and the gate ---------------------------------------------------------------------


class _Host:
    """A testinfra host whose ``run`` answers every command with one recorded result."""

    def __init__(self, stdout, rc=0, stderr=""):
        self.result = SimpleNamespace(stdout=stdout, rc=rc, stderr=stderr)
        self.commands: list[str] = []

    def run(self, command):
        self.commands.append(command)
        return self.result


def test_the_check_skips_an_unbaked_image(lab_config):
    with pytest.raises(pytest.skip.Exception, match="not a baked image"):
        cache_checks.test_baked_cache_was_used(_Host(HIT), plan_host("h", lab_config).checks, None)


def test_the_check_passes_a_hit_fails_a_miss_naming_it_and_cannot_check_the_unreadable(lab_data):
    config = host_config(dict(lab_data, vllm_image_tag=BAKED_TAG))
    checks = plan_host("h", config).checks
    hit = _Host(HIT)
    cache_checks.test_baked_cache_was_used(hit, checks, None)
    assert len(hit.commands) == len(config.instances()) and "cache-proof.sh" in hit.commands[0]
    with pytest.raises(AssertionError, match=r"tiny-llama-a: 4 file\(s\) compiled .*Triton: 2 .*Compiling a graph for"):
        cache_checks.test_baked_cache_was_used(_Host(MISS), checks, None)
    with pytest.raises(CannotCheck, match="not running"):
        cache_checks.test_baked_cache_was_used(_Host("problem\tcontainer vllm-a is not running\nend\n"), checks, None)
    with pytest.raises(CannotCheck, match="exited 255"):
        cache_checks.test_baked_cache_was_used(_Host("", rc=255, stderr="ssh: lost"), checks, None)


def test_the_gate_checks_the_cache_of_a_baked_image_only(lab_data):
    assert compliance.gate_modules(host_config(lab_data)) == ("gpu", "vllm")
    baked = compliance.gate_modules(host_config(dict(lab_data, vllm_image_tag=BAKED_TAG)))
    assert baked == ("gpu", "vllm", "cache")
    assert [p.rsplit("/", 1)[-1] for p in compliance.module_paths(list(baked))] == [
        "test_gpu.py",
        "test_vllm.py",
        "test_cache.py",
    ]
