"""A new version that cannot get ready is rolled back on its host only; the argument check touches nothing.

Needs root and the lab (``./dev test`` brings both); alone, on a lab that is up and deployed:
``ROCMFLEET_LAB_REUSE=1 .venv/bin/pytest -m lab tests/e2e/test_rollback.py``. It deploys, so
nobody else may be deploying to the lab meanwhile.

Two failed versions, side by side on two hosts (two pyinfra runs at once, as a rollout runs its
hosts; each restarts vLLM, the lab's dearest step):

- lab-2: a version that passes vLLM's argument check but never gets ready, the lab's stand-in tag
  ``0.32.0-lab.never-ready`` (tests/lab/image.py: its entrypoint exits 1 a few seconds after it
  starts, as an engine that dies while it loads; its ``python3`` still checks the arguments). The
  unit restarts it until systemd gives up and the deploy's wait stops waiting for it; the deploy
  (the lab less lab-3) fails lab-2 alone and rolls it back; lab-1 is not touched.
- lab-3: readiness checks answers (issue 12). An instance served under a non-ASCII name
  (``tiny-llama-é``) becomes ready; then a version whose answer to the known-answer request does
  not match (``expect_regex`` edited to something the model never says, on the second image tag
  so that there is a version to roll back to) is given up at once and rolled back to it. lab-3
  gets the name and the wrong answer from a copy of the lab profile (its own host data names the
  copy), so the other run never reads them; two ``--limit`` deploys, then lab-3 put back.
"""

from __future__ import annotations

import contextlib
import json
import os
import textwrap
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rocmfleet.domain.vllmfiles import layout
from rocmfleet.plan import swap
from tests.conftest import ROOT, connect, pyinfra_json
from tests.e2e.test_deploy import complete, pyinfra_deploy
from tests.lab.image import NEVER_READY_TAG

pytestmark = pytest.mark.lab

INSTANCE = "lab-tiny-llama-0"  # inventories/lab.py: the hosts after the first run one instance
FILES = layout(INSTANCE)
UNIT, CONTAINER = FILES.unit, FILES.container
SERVE_JSON = f"{FILES.last_good_dir}/serve.json"  # the last good version (rocmfleet.domain.lastgood)
REPO = "rocmfleet-lab/vllm-cpu"
GOOD_TAG, BAD_TAG = "0.32.0-lab.1", "0.32.0-lab.2"
#: Short, to fail the new version fast; the old one still gets the default deadline to come back.
BAD_TIMEOUT_S = 180


def bad_version_inventory(tmp_path: Path, lab, target: str, data: dict | None = None) -> Path:
    """The lab inventory with the bad version (or ``data``) as ``target``'s own data (host data
    wins over groups), as ``<tmp_path>/lab_<target>_<n>.py``."""
    repo = f"{lab.registry}/{REPO}"
    bad = data or {
        "vllm_image_tag": NEVER_READY_TAG,
        "vllm_image_digest": lab.images[f"{repo}:{NEVER_READY_TAG}"],
        "vllm_ready_timeout_s": BAD_TIMEOUT_S,
    }
    stem = f"lab_{target.replace('-', '_')}"
    path = tmp_path / f"{stem}_{len(list(tmp_path.glob(stem + '_*.py')))}.py"
    path.write_text(
        textwrap.dedent(
            f"""
            import sys as _sys
            _sys.path.insert(0, {str(ROOT)!r})
            import inventories.lab as _lab

            _bad = {bad!r}
            all = (  # noqa: A001
                [(name, {{**data, **_bad}} if name == {target!r} else data) for name, data in _lab.all[0]],
                _lab.all[1],
            )
            gpu_nodes = _lab.gpu_nodes
            """
        )
    )
    return path


def started(lab, ssh_config) -> dict[str, str]:
    """``{"<unit>@<host>": "<StartedAt> <image>"}`` of every lab container."""
    out = {}
    for name, address in sorted(lab.hosts.items()):
        host = connect(address, ssh_config)
        listed = host.check_output("docker ps --filter label=org.rocmfleet.instance --format '{{.Names}}'")
        for container in listed.split():
            out[f"{container}@{name}"] = host.check_output(
                "docker inspect --format '{{.State.StartedAt}} {{.Config.Image}}' %s", container
            )
    return out


@pytest.fixture(scope="module")
def converged(lab):
    rc, report, stderr = pyinfra_deploy()
    assert rc == 0, stderr[-4000:]
    return report


def test_the_parser_check_rejects_bad_arguments_without_touching_the_running_container(lab, converged, ssh_config):
    name, address = sorted(lab.hosts.items())[1]
    host = connect(address, ssh_config)
    before = host.check_output("docker inspect --format '{{.State.StartedAt}}' %s", CONTAINER)
    image = f"{lab.registry}/{REPO}:{GOOD_TAG}@{lab.images[f'{lab.registry}/{REPO}:{GOOD_TAG}']}"
    args = ["/opt/models/tiny-llama", "--served-model-name", "tiny-llama", "--port", "8000"]

    good = host.run("sh -c %s", swap.serve_args_check_script(image, args, {"VLLM_CPU_KVCACHE_SPACE": "1"}, "probe"))
    assert good.rc == 0, good.stderr
    assert good.stdout.strip() == "vllm serve (vLLM 0.32.0) accepts the arguments"

    bad = host.run("sh -c %s", swap.serve_args_check_script(image, [*args, "--no-such-flag", "1"], {}, "probe"))
    assert bad.rc == 1
    assert bad.stderr.splitlines() == [
        "vllm serve: error: unrecognized arguments: --no-such-flag 1",
        f"vLLM in {image} rejects the new vllm serve arguments of instance probe; nothing was swapped",
    ]
    assert host.check_output("docker inspect --format '{{.State.StartedAt}}' %s", CONTAINER) == before
    assert host.check_output("docker ps -a --filter label=org.rocmfleet.check --format '{{.Names}}'") == ""


def test_a_never_ready_version_and_a_wrong_known_answer_each_roll_back_on_their_host_alone(
    lab, converged, ssh_config, tmp_path
):
    """lab-2's never-ready version and lab-3's non-ASCII name then wrong known answer, side by side."""
    names = sorted(lab.hosts)
    with ThreadPoolExecutor(2) as pool:
        never = pool.submit(never_ready_on, lab, ssh_config, tmp_path, names[1], names[2])
        wrong = pool.submit(wrong_known_answer_on, lab, ssh_config, tmp_path, names[2])
        wrong.result()
        never.result()


def never_ready_on(lab, ssh_config, tmp_path: Path, target: str, spare: str) -> None:
    """The never-ready version as ``target``'s host data, deployed over the lab less ``spare``
    (the other case's host): ``target`` fails alone, is rolled back and serves; no other host's
    container was restarted; the good configuration again changes nothing."""
    address = lab.hosts[target]
    repo = f"{lab.registry}/{REPO}"
    good_digest, bad_digest = lab.images[f"{repo}:{GOOD_TAG}"], lab.images[f"{repo}:{NEVER_READY_TAG}"]
    host = connect(address, ssh_config)
    good_unit = host.file(FILES.unit_path).content_string
    good_env = host.file(FILES.env_file).content_string
    saved = json.loads(host.file(SERVE_JSON).content_string)
    assert saved["image"] == f"{repo}:{GOOD_TAG}@{good_digest}"  # the converged deploy kept it as last good

    def others() -> dict[str, str]:
        return {k: v for k, v in started(lab, ssh_config).items() if not k.endswith((f"@{target}", f"@{spare}"))}

    before = others()
    inventory = str(bad_version_inventory(tmp_path, lab, target))
    rc, report, stderr = pyinfra_json("deploy.py", "-y", "--exclude", spare, inventory=inventory)

    assert rc != 0
    results = report["results"]
    assert results["failed_hosts"] == [target], stderr[-4000:]
    by_name = {op["name"]: op for op in results["operations"]}

    def succeeded(prefix: str) -> set[str]:
        # An operation in a host.loop is named after the first host's instance (lab-1's units).
        return {h for op in results["operations"] if op["name"].startswith(prefix) for h in op["success"]}

    assert target in succeeded("vllm | Check the vllm serve arguments of")  # checked, passed, then swapped
    assert target in succeeded("vllm | Restart vllm-")
    wait = by_name["vllm | Wait until every vLLM instance is ready; roll back each one that is not"]
    assert wait["error"] == [target]
    said = json.dumps(report) + stderr
    assert f"({UNIT}, port 8000, image {repo}:{NEVER_READY_TAG}@{bad_digest}) not ready after {BAD_TIMEOUT_S} s" in said
    assert f"{UNIT} rolled back to image {repo}:{GOOD_TAG}@{good_digest}: ready again" in said
    assert "last 40 log lines of its container:" in stderr  # followed by them (pyinfra prints the op's output)

    # The target is back on the old image, with the old files, and serves.
    assert host.file(FILES.unit_path).content_string == good_unit
    assert host.file(FILES.env_file).content_string == good_env
    image = host.check_output("docker inspect --format '{{.Config.Image}}' %s", CONTAINER)
    assert image == f"{repo}:{GOOD_TAG}@{good_digest}"
    assert complete(address)["model"] == "tiny-llama"
    assert host.service(UNIT).is_running
    assert others() == before  # every other host's containers kept running, untouched

    # The good configuration again: nothing to do anywhere.
    rc, report, stderr = pyinfra_deploy("--exclude", spare)
    assert rc == 0, stderr[-4000:]
    changed = {op["name"]: op["success"] for op in report["results"]["operations"] if op["success"]}
    assert changed == {}, f"operations that changed something after the roll back: {changed}"


# --- readiness that checks answers (issue 12) -----------------------------------------------------

PROFILE = ROOT / "group_vars" / "profiles" / "lab-tiny-llama.yml"


def write_whole(path: Path, text: str) -> None:
    """Write ``path`` as one rename, so that a pyinfra run reading the profiles meanwhile never
    sees half of it (its temporary name does not end in ``.yml``)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@contextlib.contextmanager
def profile_edited(old: str, new: str, path: Path = PROFILE):
    """The profile ``path`` with ``old`` replaced by ``new`` (once), put back as it was afterwards."""
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} not once in {path}"
    try:
        write_whole(path, text.replace(old, new))
        yield
    finally:
        write_whole(path, text)


@contextlib.contextmanager
def profile_copy(name: str, *edits: tuple[str, str]):
    """``group_vars/profiles/<name>.yml``: the lab profile named ``name``, with each ``(old,
    new)`` of ``edits`` made (each ``old`` there once); removed afterwards."""
    text = PROFILE.read_text().replace("name: lab-tiny-llama\n", f"name: {name}\n", 1)
    for old, new in edits:
        assert text.count(old) == 1, f"{old!r} not once in {PROFILE}"
        text = text.replace(old, new)
    path = PROFILE.with_name(f"{name}.yml")
    try:
        write_whole(path, text)
        yield path
    finally:
        path.unlink(missing_ok=True)


def known_answer_line() -> str:
    """The lab profile's ``expect_regex`` line (what its model answers greedily)."""
    (line,) = [line for line in PROFILE.read_text().splitlines() if line.strip().startswith("expect_regex:")]
    return line


def models(address: str, port: int = 8000) -> list[str]:
    with urllib.request.urlopen(f"http://{address}:{port}/v1/models", timeout=30) as response:
        return [entry["id"] for entry in json.loads(response.read())["data"]]


def wrong_known_answer_on(lab, ssh_config, tmp_path: Path, target: str) -> None:
    """``target`` alone (``--limit``), two deploys, one restore: the instance served as
    ``tiny-llama-é`` becomes ready and is kept as the last good version; then another image whose
    known answer (the profile's ``expect_regex``, edited) does not match is given up at once and
    rolled back to that last good version, name included. The name and the answer come from a
    copy of the lab profile that only ``target``'s host data names."""
    address = lab.hosts[target]
    repo = f"{lab.registry}/{REPO}"
    good, new = (f"{repo}:{tag}@{lab.images[f'{repo}:{tag}']}" for tag in (GOOD_TAG, BAD_TAG))
    host = connect(address, ssh_config)
    name = "tiny-llama-é"
    # Its own profile, the instance keeping its name (so its last good version is the one kept).
    own = {"vllm_profile": "lab-tiny-llama-e", "vllm_instances": [{"name": INSTANCE, "port": 8000, "gpus": [0]}]}
    # Another image (so the unit changes and there is a version to roll back to) that serves the
    # same model well; only the profile's expected answer is wrong.
    bad = {**own, "vllm_image_tag": BAD_TAG, "vllm_image_digest": lab.images[f"{repo}:{BAD_TAG}"]}
    line = known_answer_line()
    wrong = line[: len(line) - len(line.lstrip())] + 'expect_regex: "^rocmfleet: not what the model says$"'
    try:
        with profile_copy(
            "lab-tiny-llama-e", ("served_model_name: tiny-llama\n", f'served_model_name: "{name}"\n')
        ) as path:
            inventory = str(bad_version_inventory(tmp_path, lab, target, own))
            rc, report, stderr = pyinfra_json("deploy.py", "-y", "--limit", target, inventory=inventory)
            assert rc == 0, stderr[-4000:]
            assert models(address) == [name]
            # the known answer was checked with that name, and it was kept as the last good version
            assert name in json.loads(host.file(SERVE_JSON).content_string)["serve_args"]
            with profile_edited(line, wrong, path):
                inventory = str(bad_version_inventory(tmp_path, lab, target, bad))
                rc, report, stderr = pyinfra_json("deploy.py", "-y", "--limit", target, inventory=inventory)
        said = json.dumps(report) + stderr
        # The only host of a --limit run failed: pyinfra stops (pyinfra/api/state.py, fail_hosts:
        # "No hosts remaining!") without a JSON report; the operation's output is on stderr.
        assert rc != 0
        assert "No hosts remaining!" in stderr, stderr[-4000:]
        assert f"{UNIT} answered the known-answer request wrongly; not waiting for it any longer" in said, said[-4000:]
        assert "which does not match" in said and "not what the model says" in said
        assert f"{UNIT} rolled back to image {good}: ready again" in said
        assert host.check_output("docker inspect --format '{{.Config.Image}}' %s", CONTAINER) == good
        assert models(address) == [name]  # the last good version's arguments, not only its image
        saved = json.loads(host.file(SERVE_JSON).content_string)
        assert saved["image"] == good and name in saved["serve_args"]  # the wrong version was never kept
        assert new not in host.file(FILES.unit_path).content_string
    finally:
        rc, report, stderr = pyinfra_deploy("--limit", target)
    assert rc == 0, stderr[-4000:]
    assert models(address) == ["tiny-llama"]
