"""A new version that cannot get ready is rolled back on its host only; the argument check touches nothing.

Needs root and the lab (``./dev test`` brings both); alone, on a lab that is up and deployed:
``ROCMFLEET_LAB_REUSE=1 .venv/bin/pytest -m lab tests/e2e/test_rollback.py``. It deploys (the
whole lab, a bad version on one host, then the good configuration again), so nobody else may be
deploying to the lab meanwhile.

The bad version passes vLLM's argument parser but never gets ready: the second image tag
(another digest, so the unit changes) with ``VLLM_CPU_OMP_THREADS_BIND`` set to something that is
not a CPU list. vLLM reads that variable only when its CPU worker starts
(``vllm/utils/ompmultiprocessing.py``, ``cpu_resource_utils.parse_id_list``: ``int()`` raises),
so the parser check accepts it and the engine dies at every start.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from rocmfleet import rollout
from tests.conftest import ROOT, connect, pyinfra_json
from tests.e2e.test_deploy import complete, pyinfra_deploy

pytestmark = pytest.mark.lab

UNIT = "vllm-lab-tiny-llama-0.service"  # inventories/lab.py: the hosts after the first run one instance
CONTAINER = UNIT.removesuffix(".service")
REPO = "rocmfleet-lab/vllm-cpu"
GOOD_TAG, BAD_TAG = "0.32.0-lab.1", "0.32.0-lab.2"
#: Short, to fail the new version fast; the old one still gets the default deadline to come back.
BAD_TIMEOUT_S = 180


def bad_version_inventory(tmp_path: Path, lab, target: str) -> Path:
    """The lab inventory with the bad version as ``target``'s own data (host data wins over groups)."""
    repo = f"{lab.registry}/{REPO}"
    bad = {
        "vllm_image_tag": BAD_TAG,
        "vllm_image_digest": lab.images[f"{repo}:{BAD_TAG}"],
        "vllm_env": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "not-a-cpu-list"},
        "vllm_ready_timeout_s": BAD_TIMEOUT_S,
    }
    path = tmp_path / "lab_bad_version.py"
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

    good = host.run("sh -c %s", rollout.serve_args_check_script(image, args, {"VLLM_CPU_KVCACHE_SPACE": "1"}, "probe"))
    assert good.rc == 0, good.stderr
    assert good.stdout.strip() == "vllm serve (vLLM 0.32.0) accepts the arguments"

    bad = host.run("sh -c %s", rollout.serve_args_check_script(image, [*args, "--no-such-flag", "1"], {}, "probe"))
    assert bad.rc == 1
    assert bad.stderr.splitlines() == [
        "vllm serve: error: unrecognized arguments: --no-such-flag 1",
        f"vLLM in {image} rejects the new vllm serve arguments of instance probe; nothing was swapped",
    ]
    assert host.check_output("docker inspect --format '{{.State.StartedAt}}' %s", CONTAINER) == before
    assert host.check_output("docker ps -a --filter label=org.rocmfleet.check --format '{{.Names}}'") == ""


def test_a_version_that_never_gets_ready_is_rolled_back_on_its_host_only(lab, converged, ssh_config, tmp_path):
    target, address = sorted(lab.hosts.items())[1]
    repo = f"{lab.registry}/{REPO}"
    good_digest, bad_digest = lab.images[f"{repo}:{GOOD_TAG}"], lab.images[f"{repo}:{BAD_TAG}"]
    host = connect(address, ssh_config)
    unit_path = f"/etc/systemd/system/{UNIT}"
    good_unit = host.file(unit_path).content_string
    saved = json.loads(
        host.file(f"/etc/rocmfleet/vllm/{CONTAINER.removeprefix('vllm-')}.last-good/serve.json").content_string
    )
    assert saved["image"] == f"{repo}:{GOOD_TAG}@{good_digest}"  # the converged deploy kept it as last good
    before = started(lab, ssh_config)

    rc, report, stderr = pyinfra_json("deploy.py", "-y", inventory=str(bad_version_inventory(tmp_path, lab, target)))

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
    assert f"({UNIT}, port 8000, image {repo}:{BAD_TAG}@{bad_digest}) not ready after {BAD_TIMEOUT_S} s" in said
    assert f"{UNIT} rolled back to image {repo}:{GOOD_TAG}@{good_digest}: ready again" in said
    assert "last 40 log lines of its container:" in stderr  # followed by them (pyinfra prints the op's output)

    # The target is back on the old image, with the old files, and serves.
    assert host.file(unit_path).content_string == good_unit
    assert "not-a-cpu-list" not in host.check_output("cat /etc/rocmfleet/vllm/%s.env", CONTAINER.removeprefix("vllm-"))
    image = host.check_output("docker inspect --format '{{.Config.Image}}' %s", CONTAINER)
    assert image == f"{repo}:{GOOD_TAG}@{good_digest}"
    assert complete(address)["model"] == "tiny-llama"
    assert host.service(UNIT).is_running
    # Every other host's containers kept running, untouched.
    after = started(lab, ssh_config)
    assert {k: v for k, v in after.items() if not k.endswith("@" + target)} == {
        k: v for k, v in before.items() if not k.endswith("@" + target)
    }

    # The good configuration again: nothing to do anywhere.
    rc, report, stderr = pyinfra_deploy()
    assert rc == 0, stderr[-4000:]
    changed = {op["name"]: op["success"] for op in report["results"]["operations"] if op["success"]}
    assert changed == {}, f"operations that changed something after the roll back: {changed}"
