"""``rocmfleet/scripts/model-stage.sh`` against a stand-in ``docker`` that runs the container's
command here, with a stand-in ``hf`` that lays a snapshot out as huggingface_hub does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rocmfleet import scripts
from rocmfleet.config.settings import host_config
from rocmfleet.domain import hfmodel
from rocmfleet.facts.state import Gathered, PathState
from rocmfleet.plan import vllmplan

MODEL = "org/tiny-llama"
REV = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "hf_stand_in_token_never_in_argv"

#: docker: records its argv (JSON, one file per call), then runs what follows ``--entrypoint sh IMAGE``
#: here with the ``--env-file`` and ``--env`` variables, the volume's host side as $STAND_IN_ROOT.
DOCKER = r"""#!PYTHON
import json, os, sys
from pathlib import Path
stub = Path(os.environ["STUB"])
calls = sorted(stub.glob("docker.*.json"))
(stub / f"docker.{len(calls)}.json").write_text(json.dumps(sys.argv[1:]))
args = sys.argv[1:]
env = {"PATH": os.environ["PATH"], "STUB": str(stub)}
i = 1
while i < len(args):
    a = args[i]
    if a == "--env-file":
        for line in Path(args[i + 1]).read_text().splitlines():
            name, _, value = line.partition("=")
            env[name] = value
        i += 2
    elif a == "--env":
        name, _, value = args[i + 1].partition("=")
        env[name] = value
        i += 2
    elif a == "--volume":
        env["STAND_IN_ROOT"] = args[i + 1].split(":")[0]
        i += 2
    elif a in ("--network", "--entrypoint"):
        i += 2
    elif a.startswith("--"):
        i += 1
    else:
        break  # the image
os.execvpe("sh", ["sh", *args[i + 1 :]], env)
"""

#: hf: records argv and whether HF_TOKEN reached it, then writes the snapshot (or fails as the hub would).
HF = r"""#!PYTHON
import json, os, sys, time
from pathlib import Path
stub = Path(os.environ["STUB"])
with open(stub / "hf.calls", "a") as f:
    f.write(json.dumps({"argv": sys.argv, "token": os.environ.get("HF_TOKEN"),
                        "cache": os.environ.get("HF_HUB_CACHE")}) + "\n")
if (stub / "fail").exists():
    print("Downloading...", flush=True)
    print("huggingface_hub.errors.GatedRepoError: 401 Client Error. Cannot access gated repo", file=sys.stderr)
    sys.exit(1)
time.sleep(float(os.environ.get("STAND_IN_DELAY", "0")))
if (stub / "no-snapshot").exists():
    sys.exit(0)
model, revision = sys.argv[2], sys.argv[sys.argv.index("--revision") + 1]
repo = Path(os.environ["STAND_IN_ROOT"]) / "hub" / ("models--" + model.replace("/", "--"))
(repo / "snapshots" / revision).mkdir(parents=True, exist_ok=True)
(repo / "snapshots" / revision / "config.json").write_text("{}")
print(repo / "snapshots" / revision)
"""


def _stand_ins(tmp_path: Path, cli: str = "hf") -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("docker", DOCKER), (cli, HF)):
        (bin_dir / name).write_text(text.replace("#!PYTHON", "#!" + sys.executable, 1))
        (bin_dir / name).chmod(0o755)
    (tmp_path / "secrets").write_text(f"HF_TOKEN={TOKEN}\n")
    (tmp_path / "cache").mkdir()
    return {**os.environ, "STUB": str(tmp_path), "PATH": f"{bin_dir}:/usr/bin:/bin"}


def _staged(tmp_path: Path, revision: str = REV) -> hfmodel.Staged:
    return hfmodel.Staged(MODEL, revision, str(tmp_path / "cache"), "registry/vllm:t@sha256:" + "a" * 64)


def _stage(env: dict[str, str], staged: hfmodel.Staged, secrets: str) -> subprocess.CompletedProcess[str]:
    args = [*staged.script_args()]
    args[4] = secrets  # the test's copy of the secrets file
    return subprocess.run(
        ["sh", str(scripts.DIR / "model-stage.sh"), *args], env=env, capture_output=True, text=True, timeout=30
    )


def _hf_calls(tmp_path: Path) -> list[dict[str, object]]:
    path = tmp_path / "hf.calls"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _docker_argvs(tmp_path: Path) -> list[list[str]]:
    return [json.loads(p.read_text()) for p in sorted(tmp_path.glob("docker.*.json"))]


@pytest.mark.parametrize("cli", ["hf", "huggingface-cli"])
def test_a_missing_snapshot_is_downloaded_once_with_the_images_cli_and_stamped(tmp_path, cli):
    env = _stand_ins(tmp_path, cli)
    staged = _staged(tmp_path)
    proc = _stage(env, staged, str(tmp_path / "secrets"))
    assert proc.returncode == 0, proc.stderr
    assert "(downloaded)" in proc.stdout
    assert Path(staged.present, "config.json").exists() and Path(staged.stamp).exists()
    (call,) = _hf_calls(tmp_path)
    assert call["argv"][1:] == ["download", MODEL, "--revision", REV, "--exclude", "original/*"]
    assert call["token"] == TOKEN  # from the env file
    assert call["cache"] == hfmodel.CONTAINER_HUB_CACHE
    (argv,) = _docker_argvs(tmp_path)
    assert argv[:3] == ["run", "--rm", "--network"]
    assert ["--env-file", str(tmp_path / "secrets")] == argv[argv.index("--env-file") : argv.index("--env-file") + 2]
    assert f"{tmp_path / 'cache'}:/root/.cache/huggingface" in argv  # read-write for the download only
    assert staged.image in argv

    # Staged: the next run starts no container.
    again = _stage(env, staged, str(tmp_path / "secrets"))
    assert again.returncode == 0 and again.stdout.startswith("staged ")
    assert len(_docker_argvs(tmp_path)) == 1 and len(_hf_calls(tmp_path)) == 1


def test_the_token_is_never_an_argument(tmp_path):
    env = _stand_ins(tmp_path)
    proc = _stage(env, _staged(tmp_path), str(tmp_path / "secrets"))
    assert proc.returncode == 0, proc.stderr
    (argv,) = _docker_argvs(tmp_path)
    assert all(TOKEN not in a for a in argv)
    assert all(TOKEN not in str(a) for a in _hf_calls(tmp_path)[0]["argv"])  # type: ignore[attr-defined]
    assert TOKEN not in proc.stdout + proc.stderr
    assert TOKEN not in " ".join(_staged(tmp_path).script_args())


def test_a_pre_staged_snapshot_with_its_stamp_starts_nothing(tmp_path):
    env = _stand_ins(tmp_path)
    staged = _staged(tmp_path)
    Path(staged.present).mkdir(parents=True)
    Path(staged.stamp).parent.mkdir(parents=True)
    Path(staged.stamp).write_text("2026-01-01T00:00:00Z\n")
    proc = _stage(env, staged, str(tmp_path / "secrets"))
    assert proc.returncode == 0 and proc.stdout.startswith("staged ")
    assert _docker_argvs(tmp_path) == [] and _hf_calls(tmp_path) == []


def test_a_snapshot_without_its_stamp_is_downloaded_again(tmp_path):
    """A snapshot folder alone may be a download cut short (huggingface_hub fills it file by file)."""
    env = _stand_ins(tmp_path)
    staged = _staged(tmp_path)
    Path(staged.present).mkdir(parents=True)
    proc = _stage(env, staged, str(tmp_path / "secrets"))
    assert proc.returncode == 0, proc.stderr
    assert len(_hf_calls(tmp_path)) == 1 and Path(staged.stamp).exists()


def test_a_failed_download_fails_with_one_line_and_no_stamp(tmp_path):
    env = _stand_ins(tmp_path)
    (tmp_path / "fail").write_text("")
    staged = _staged(tmp_path)
    proc = _stage(env, staged, str(tmp_path / "secrets"))
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"rocmfleet: model-stage: downloading {MODEL}@{REV} into ")
    assert "failed (exit 1): huggingface_hub.errors.GatedRepoError: 401 Client Error." in proc.stderr
    assert not Path(staged.stamp).exists()


def test_a_download_that_leaves_no_snapshot_fails(tmp_path):
    env = _stand_ins(tmp_path)
    (tmp_path / "no-snapshot").write_text("")
    proc = _stage(env, _staged(tmp_path), str(tmp_path / "secrets"))
    assert proc.returncode == 1 and "exited 0 but" in proc.stderr and "is missing" in proc.stderr


def test_an_unpinned_model_is_staged_at_its_branch(tmp_path):
    env = _stand_ins(tmp_path)
    staged = _staged(tmp_path, hfmodel.DEFAULT_BRANCH)
    assert staged.present.endswith(f"/hub/models--org--tiny-llama/refs/{hfmodel.DEFAULT_BRANCH}")
    # The stand-in lays out a snapshot named after the revision; the branch's ref file is the hub's.
    ref = Path(staged.present)
    ref.parent.mkdir(parents=True)
    ref.write_text(REV)
    proc = _stage(env, staged, str(tmp_path / "secrets"))
    assert proc.returncode == 0, proc.stderr
    assert _hf_calls(tmp_path)[0]["argv"][3:5] == ["--revision", "main"]  # type: ignore[index]


def test_hosts_sharing_one_cache_download_once(tmp_path):
    """Two stagings at once on one cache (two hosts on one NFS export): the lock makes the second
    wait, then find the model staged."""
    env = {**_stand_ins(tmp_path), "STAND_IN_DELAY": "1"}
    staged = _staged(tmp_path)
    args = ["sh", str(scripts.DIR / "model-stage.sh"), *staged.script_args()[:4], str(tmp_path / "secrets")]
    procs = [subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=30)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert len(_hf_calls(tmp_path)) == 1
    assert sorted("downloaded" in out for out in outputs) == [False, True]


def test_usage(tmp_path):
    proc = subprocess.run(["sh", str(scripts.DIR / "model-stage.sh"), "x"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("usage: model-stage.sh")


# The plan: the HostState read the role makes anyway says whether the model is staged.


def _hub_config():
    return host_config({"vllm_profile": "qwen3-30b-a3b"})


def test_the_roles_one_read_asks_for_the_stamp_and_the_snapshot():
    config = _hub_config()
    staged = vllmplan.staging(config)
    assert staged is not None and staged.revision == config.profile.revision
    assert staged.stamp == (
        "/var/cache/huggingface/rocmfleet-staged/models--Qwen--Qwen3-30B-A3B/ad44e777bcd18fa416d9da3bd8f70d33ebb85d39"
    )
    assert staged.present == (
        "/var/cache/huggingface/hub/models--Qwen--Qwen3-30B-A3B/snapshots/ad44e777bcd18fa416d9da3bd8f70d33ebb85d39"
    )
    paths = vllmplan.query(config)["paths"]
    assert staged.stamp in paths and staged.present in paths  # type: ignore[operator]


def _read(**types: str) -> Gathered:
    return Gathered(paths={p: PathState(kind="path", path=p, type=t) for p, t in types.items()})  # type: ignore[arg-type]


def test_staged_only_with_the_stamp_file_and_the_snapshot():
    staged = vllmplan.staging(_hub_config())
    assert staged is not None
    assert vllmplan.model_staged(staged, _read(**{staged.stamp: "file", staged.present: "dir"}))
    assert not vllmplan.model_staged(staged, _read(**{staged.stamp: "missing", staged.present: "dir"}))
    assert not vllmplan.model_staged(staged, _read(**{staged.stamp: "file", staged.present: "missing"}))
    assert not vllmplan.model_staged(staged, Gathered())  # unknown: staged again (the script decides)
    assert vllmplan.model_staged(None, Gathered())  # a local path: nothing to stage


def test_a_local_model_asks_for_nothing(lab_config):
    import dataclasses

    profile = lab_config.profile.model_copy(update={"model": "/opt/models/tiny-llama", "revision": None})
    local = dataclasses.replace(lab_config, profile=profile)
    assert vllmplan.staging(local) is None
    assert not [p for p in vllmplan.query(local)["paths"] if "rocmfleet-staged" in p]  # type: ignore[attr-defined]
    assert vllmplan.staging(lab_config) is not None  # the lab profile's hub model is staged


def test_a_pinned_hub_models_tokenizer_is_read_from_its_staged_snapshot_by_the_benchmark():
    from rocmfleet.domain.benchshape import Case
    from rocmfleet.fleet.bench.bench import bench_command

    snapshot = hfmodel.container_snapshot(MODEL, REV)
    assert snapshot == f"/root/.cache/huggingface/hub/models--org--tiny-llama/snapshots/{REV}"
    assert hfmodel.container_snapshot("/opt/models/tiny-llama", None) is None  # a local path loads itself
    assert hfmodel.container_snapshot(MODEL, "main") is None  # unpinned: refs/main is in the cache
    case = Case(isl=8, osl=8, concurrency=1, num_prompts=1)
    argv = bench_command(case, 8000, MODEL, "/tmp/r/x.json", tokenizer=snapshot)
    assert argv[argv.index("--tokenizer") + 1] == snapshot
    assert "--tokenizer" not in bench_command(case, 8000, MODEL, "/tmp/r/x.json")


def test_the_staging_environment_holds_the_hub_endpoint_when_one_is_set():
    from rocmfleet.config.errors import ConfigError
    from rocmfleet.plan.instance import stage_env_content

    assert "HF_ENDPOINT" not in stage_env_content(host_config({"vllm_profile": "qwen3-30b-a3b"})).reveal()
    mirror = host_config({"vllm_profile": "qwen3-30b-a3b", "vllm_hf_endpoint": "http://10.0.0.1:8080"})
    assert "HF_ENDPOINT=http://10.0.0.1:8080" in stage_env_content(mirror).reveal().splitlines()
    with pytest.raises(ConfigError) as refused:
        host_config({"vllm_profile": "qwen3-30b-a3b", "vllm_hf_endpoint": "hf-mirror.example.com"})
    assert "vllm_hf_endpoint" in str(refused.value)


@pytest.mark.parametrize(
    ("endpoint", "said"),
    [
        ("http://user:s3cr3t@mirror.example.com", "holds credentials"),
        ("https://hf_tok3n@mirror.example.com:8443/hf", "holds credentials"),
        ("ftp://mirror.example.com", "scheme 'ftp' is not http or https"),
        ("http://:8080", "names no host"),
        ("https://mirror.example.com:99999", "Port out of range"),
        ("https://mirror.example.com/?token=x", "must not hold a query"),
        ("https://mirror.example.com /hf", "white space"),
    ],
)
def test_a_hub_endpoint_that_is_no_plain_http_url_is_refused_and_never_shows_credentials(endpoint, said):
    from rocmfleet.config.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        host_config({"vllm_profile": "qwen3-30b-a3b", "vllm_hf_endpoint": endpoint})
    ((problem,),) = [[p for p in refused.value.problems if p.key == "vllm_hf_endpoint"]]
    assert said in problem.message and "allowed: http(s)://host[:port][/path]" in problem.message
    assert "s3cr3t" not in str(refused.value) and "hf_tok3n" not in str(refused.value)


@pytest.mark.parametrize("endpoint", ["https://hf-mirror.example.com", "http://10.0.0.1:8080/", "https://a.b/api/hf"])
def test_a_hub_endpoint_with_a_path_or_port_is_accepted(endpoint):
    assert host_config({"vllm_profile": "qwen3-30b-a3b", "vllm_hf_endpoint": endpoint}).settings.vllm_hf_endpoint
