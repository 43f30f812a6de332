"""The lab's stand-in Hugging Face Hub (tests/lab/hfhub.py) against the real client: huggingface_hub
from the lab's vLLM image root filesystem, run by a Python 3.11 in a subprocess (the image's
compiled dependencies need that minor version). No root, no lab: a server on 127.0.0.1 and
temporary directories. The tests of the real client are skipped before the lab's image is built
(it is not there yet)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.lab import config, hfhub

SITE_PACKAGES = config.CACHE_DIR / "vllm-image-rootfs" / "opt" / "vllm" / "lib" / "python3.11" / "site-packages"
REPO = "lab/tiny-llama"
TOKEN = "hf_test"
FILES = {
    "config.json": b'{"architectures": ["LlamaForCausalLM"], "hidden_size": 64}\n',
    "tokenizer.json": json.dumps({"version": "1.0", "model": {"vocab": {f"t{i}": i for i in range(300)}}}).encode(),
    # an LFS file (a weights suffix): a few KB, every byte value
    "model.safetensors": bytes(range(256)) * 16 + b"tail",
}


def _python311() -> str | None:
    """An interpreter of the image's minor version (3.11), or None."""
    for name in ("python3.11", "python3"):
        exe = shutil.which(name)
        if exe is None:
            continue
        out = subprocess.run([exe, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip() == "(3, 11)":
            return exe
    return None


PYTHON = _python311()
_NO_CLIENT = (
    f"no huggingface_hub in {SITE_PACKAGES} (the lab's vLLM image is not built yet)"
    if not (SITE_PACKAGES / "huggingface_hub").is_dir()
    else "needs a Python 3.11 (the image's) to run its huggingface_hub"
    if PYTHON is None
    else ""
)
#: The tests that run the real client; the others need only the standard library.
needs_client = pytest.mark.skipif(bool(_NO_CLIENT), reason=_NO_CLIENT)

CLIENT = """
import json, sys
from huggingface_hub import snapshot_download
path = snapshot_download(sys.argv[1], revision=sys.argv[2], cache_dir=sys.argv[3])
print(json.dumps({"path": path}))
"""


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """A running stand-in: (endpoint, served directory, log); two tree entries a page, to page."""
    served = tmp_path / "served"
    served.mkdir()
    for name, data in FILES.items():
        (served / name).write_bytes(data)
    log = tmp_path / "hub.jsonl"
    server = hfhub.serve("127.0.0.1:0", REPO, served, log, page_size=2)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", served, log
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _client(endpoint: str, tmp: Path, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    assert PYTHON is not None
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(SITE_PACKAGES),
        "HOME": str(tmp / "home"),
        "HF_HOME": str(tmp / "hf-home"),
        "HF_ENDPOINT": endpoint,
        "HF_HUB_CACHE": str(tmp / "hub-cache"),
        "HF_TOKEN": TOKEN,
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_ENABLE_HF_TRANSFER": "0",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_UPDATE_CHECK": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "NO_PROXY": "*",
    }
    return subprocess.run([PYTHON, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120)


def _snapshot(endpoint: str, tmp: Path, revision: str = hfhub.LAB_REVISION) -> Path:
    out = _client(endpoint, tmp, CLIENT, REPO, revision, str(tmp / "hub-cache"))
    if out.returncode != 0 and ("ModuleNotFoundError" in out.stderr or "ImportError" in out.stderr):
        pytest.fail(f"the image's huggingface_hub does not import here (a compiled dependency?):\n{out.stderr}")
    assert out.returncode == 0, out.stderr
    return Path(json.loads(out.stdout.strip().splitlines()[-1])["path"])


def _entries(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


@needs_client
def test_real_client_fetches_each_file_once_with_auth_and_never_logs_the_token(
    hub: tuple[str, Path, Path], tmp_path: Path
) -> None:
    endpoint, served, log = hub
    snapshot = _snapshot(endpoint, tmp_path)

    assert snapshot == tmp_path / "hub-cache" / "models--lab--tiny-llama" / "snapshots" / hfhub.LAB_REVISION
    assert sorted(p.name for p in snapshot.iterdir()) == sorted(FILES)
    for name, data in FILES.items():
        assert (snapshot / name).read_bytes() == data, name
    # The LFS file's blob is named by its sha256, as from the Hub.
    blob = (snapshot / "model.safetensors").resolve()
    assert blob.name == hfhub.scan(served)["model.safetensors"].sha256

    entries = _entries(log)
    assert hfhub.downloads(log) == {"127.0.0.1": dict.fromkeys(FILES, 1)}
    # The tree listing came in two pages (three files, two a page), the second through the Link header.
    tree = [e for e in entries if "/tree/" in e["path"]]
    assert len(tree) == 2 and "cursor=2" in tree[1]["path"], tree
    hub_requests = [e for e in entries if e["path"] != "/api/agent-harnesses"]
    assert hub_requests and all(e["auth"] is True for e in hub_requests), hub_requests
    assert all(e["status"] in (200, 206) for e in entries), entries
    assert TOKEN not in log.read_text()

    # Again, same revision: everything is in the cache, no file is fetched again.
    before = len(entries)
    assert _snapshot(endpoint, tmp_path) == snapshot
    again = _entries(log)[before:]
    assert not [e for e in again if e["method"] == "GET" and "file" in e], again
    assert hfhub.downloads(log) == {"127.0.0.1": dict.fromkeys(FILES, 1)}


@needs_client
def test_the_branch_resolves_to_the_lab_commit(hub: tuple[str, Path, Path], tmp_path: Path) -> None:
    endpoint, _, log = hub
    snapshot = _snapshot(endpoint, tmp_path, revision="main")
    assert snapshot.name == hfhub.LAB_REVISION
    assert any(e["path"] == f"/api/models/{REPO}/revision/main" for e in _entries(log))


ERRORS = """
import sys
from huggingface_hub import snapshot_download, hf_hub_download
from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError, RemoteEntryNotFoundError
endpoint, rev, cache = sys.argv[1:4]
cases = [
    (RevisionNotFoundError, lambda: snapshot_download("lab/tiny-llama", revision="f" * 40, cache_dir=cache)),
    (RevisionNotFoundError, lambda: snapshot_download("lab/tiny-llama", revision="other", cache_dir=cache)),
    (RepositoryNotFoundError, lambda: snapshot_download("lab/nothing", revision=rev, cache_dir=cache)),
    (RemoteEntryNotFoundError, lambda: hf_hub_download("lab/tiny-llama", "nothing.bin", revision=rev, cache_dir=cache)),
]
for expected, call in cases:
    try:
        call()
    except expected:
        print("ok", expected.__name__)
    else:
        raise SystemExit(f"no {expected.__name__}")
"""


@needs_client
def test_unknown_repo_revision_or_file_are_the_hubs_errors(hub: tuple[str, Path, Path], tmp_path: Path) -> None:
    endpoint, _, log = hub
    out = _client(endpoint, tmp_path, ERRORS, endpoint, hfhub.LAB_REVISION, str(tmp_path / "hub-cache"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.split("\n").count("ok RevisionNotFoundError") == 2
    codes = {e["status"] for e in _entries(log) if e["path"] != "/api/agent-harnesses"}
    assert codes == {404}
    assert hfhub.downloads(log) == {}


def test_a_range_is_served_as_the_client_resumes(hub: tuple[str, Path, Path]) -> None:
    import http.client
    from urllib.parse import urlsplit

    endpoint, _, log = hub
    url = urlsplit(endpoint)
    conn = http.client.HTTPConnection(url.hostname or "", url.port)
    conn.request("GET", f"/{REPO}/resolve/{hfhub.LAB_REVISION}/model.safetensors", headers={"Range": "bytes=4000-"})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    data = FILES["model.safetensors"]
    assert resp.status == 206
    assert resp.getheader("Content-Range") == f"bytes 4000-{len(data) - 1}/{len(data)}"
    assert body == data[4000:]
    assert resp.getheader("X-Repo-Commit") == hfhub.LAB_REVISION
    assert [e["auth"] for e in _entries(log)] == [False]


API = """
import json, sys
from huggingface_hub import HfApi
api = HfApi()
rev = sys.argv[1]
info = api.model_info("lab/tiny-llama", files_metadata=True)
tree = list(api.list_repo_tree("lab/tiny-llama", revision=rev, recursive=True, expand=True))
paths = api.get_paths_info("lab/tiny-llama", ["config.json", "model.safetensors", "absent.txt"], revision=rev)
print(json.dumps({
    "sha": info.sha,
    "siblings": sorted(s.rfilename for s in info.siblings),
    "lfs": {s.rfilename: s.lfs.sha256 for s in info.siblings if s.lfs},
    "tree": sorted((f.path, f.size, f.last_commit.oid) for f in tree),
    "paths": sorted(p.path for p in paths),
    "files": api.list_repo_files("lab/tiny-llama", revision=rev),
    "exists": [api.file_exists("lab/tiny-llama", n, revision=rev) for n in ("tokenizer.json", "absent.txt")],
}))
"""


@needs_client
def test_the_hub_api_calls_a_library_makes(hub: tuple[str, Path, Path], tmp_path: Path) -> None:
    endpoint, served, log = hub
    out = _client(endpoint, tmp_path, API, hfhub.LAB_REVISION)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    sha256 = hfhub.scan(served)["model.safetensors"].sha256
    assert got == {
        "sha": hfhub.LAB_REVISION,
        "siblings": sorted(FILES),
        "lfs": {"model.safetensors": sha256},
        "tree": [[n, len(d), hfhub.LAB_REVISION] for n, d in sorted(FILES.items())],
        "paths": ["config.json", "model.safetensors"],
        "files": sorted(FILES),
        "exists": [True, False],
    }
    assert hfhub.downloads(log) == {}
