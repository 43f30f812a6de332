"""A stand-in Hugging Face Hub for the lab: one model repository at one commit, served over HTTP.

The lab hosts fetch a model with the real client (``hf download lab/tiny-llama --revision
<LAB_REVISION>``, huggingface_hub 2.4.0 in the lab's vLLM image) with ``HF_ENDPOINT`` pointing
here, and a lab test counts, from this server's log, how often each host fetched each file
(:func:`downloads`). Standard library only::

    python -m tests.lab.hfhub --listen 10.213.0.1:8090 --repo lab/tiny-llama --dir PATH --log FILE

What it answers (what ``snapshot_download``/``hf_hub_download`` send, read from the client's
``_snapshot_download.py``, ``file_download.py``, ``hf_api.py`` and ``utils/_http.py``):

- ``GET /api/models/{repo}[/revision/{rev}]``: the repo's info (``sha``, ``siblings``); the client
  asks only when the revision is not a 40-hex commit;
- ``GET /api/models/{repo}/tree/{rev}[/{path}]``: the tree listing, paged as the Hub pages it
  (1000 entries, 50 with ``expand``; ``--page-size`` for tests), the next page named by a
  ``Link: <...>; rel="next"`` header;
- ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: the file itself (no redirect to a CDN), with
  ``X-Repo-Commit``, ``ETag`` (the git blob sha1, or the sha256 for an LFS file, as the Hub),
  ``Content-Length``, ``Accept-Ranges`` and ranges (the client resumes with ``Range``);
- ``POST /api/models/{repo}/paths-info/{rev}``: the tree entries of the paths named (those that
  exist), for ``HfApi.get_paths_info`` and ``HfFileSystem``;
- ``GET /api/agent-harnesses``: an empty registry (the client asks once a day, for its
  User-Agent);
- 404 with the Hub's ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``)
  for an unknown repo, revision or file, which the client turns into its own errors.

Never the Xet path: no response carries ``X-Xet-Hash`` (nor a ``xet-auth`` link) and no tree
entry a ``xetHash``, so the client downloads over plain HTTP even with ``hf_xet`` installed.
Files with a weights suffix (:data:`LFS_SUFFIXES`, as the Hub's default ``.gitattributes``) are
listed as LFS files (``lfs.oid`` the sha256, the entry's ``oid`` the sha1 of the LFS pointer),
so the client's cache names their blobs by sha256, as for a real repository.

The repository has one commit, :data:`LAB_REVISION`, and one branch, ``main``, pointing at it;
any other revision is unknown. Every request is one JSON line in the log: time, method, path
(as sent), client address, status, the repository file for a resolve request, and ``auth``
(whether an ``Authorization: Bearer ...`` header came): never the header's value.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

#: The one commit of the served repository. Made up for the lab: no such commit exists on the Hub.
LAB_REVISION = "1ab0c0ffee1ab0c0ffee1ab0c0ffee1ab0c0ffee"
#: The branch that points at :data:`LAB_REVISION` (the client's default revision).
LAB_BRANCH = "main"
#: The repository the lab serves by default.
LAB_REPO = "lab/tiny-llama"
#: The commit's date, made up like the commit (the Hub's format: ``%Y-%m-%dT%H:%M:%S.%fZ``).
LAB_COMMIT_DATE = "2026-01-01T00:00:00.000Z"
#: Suffixes the Hub's default ``.gitattributes`` stores in LFS (the ones a model repository has).
LFS_SUFFIXES = frozenset({".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".onnx", ".msgpack", ".h5"})
#: Entries per page of a tree listing, as the Hub: 1000, or 50 with ``expand``.
PAGE_SIZE = 1000
EXPAND_PAGE_SIZE = 50
_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class RepoFile:
    """One file of the repository: where it is on disk and what the Hub would say of it."""

    path: str  # relative, "/"-separated
    disk: Path
    size: int
    blob_id: str  # git blob sha1 of what git stores (the LFS pointer for an LFS file)
    sha256: str | None  # LFS files only
    pointer_size: int | None  # LFS files only

    @property
    def etag(self) -> str:
        """The Hub's ETag: the sha256 of an LFS file, else the git blob sha1."""
        return self.sha256 or self.blob_id


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _file_hashes(path: Path) -> tuple[str, str]:
    """(git blob sha1, sha256) of a file, read once in chunks."""
    size = path.stat().st_size
    sha1 = hashlib.sha1(b"blob %d\0" % size)
    sha256 = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            sha1.update(chunk)
            sha256.update(chunk)
    return sha1.hexdigest(), sha256.hexdigest()


def scan(directory: Path) -> dict[str, RepoFile]:
    """The repository's files: every regular file under ``directory`` (hidden ones left out), by path."""
    files: dict[str, RepoFile] = {}
    for disk in sorted(directory.rglob("*")):
        rel = disk.relative_to(directory).as_posix()
        if not disk.is_file() or any(part.startswith(".") for part in rel.split("/")):
            continue
        size = disk.stat().st_size
        blob_id, sha256 = _file_hashes(disk)
        if disk.suffix in LFS_SUFFIXES:
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()
            files[rel] = RepoFile(rel, disk, size, _git_blob_sha1(pointer), sha256, len(pointer))
        else:
            files[rel] = RepoFile(rel, disk, size, blob_id, None, None)
    return files


def _directories(files: dict[str, RepoFile]) -> list[str]:
    dirs = {"/".join(p.split("/")[:i]) for p in files for i in range(1, p.count("/") + 1)}
    return sorted(dirs)


class Hub:
    """What the server serves: one repository, one commit, and the log."""

    def __init__(self, repo: str, directory: Path, log: Path, page_size: int = PAGE_SIZE) -> None:
        self.repo = repo
        self.directory = directory
        self.files = scan(directory)
        self.dirs = _directories(self.files)
        self.page_size = page_size
        self.log_path = log
        self._log_lock = threading.Lock()

    def resolve(self, revision: str) -> str | None:
        """The commit ``revision`` names, or None when it names none."""
        return LAB_REVISION if revision in (LAB_REVISION, LAB_BRANCH) else None

    def log(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, sort_keys=True) + "\n"
        with self._log_lock, self.log_path.open("a", encoding="utf-8") as f:
            f.write(line)

    def tree_entry(self, path: str, expand: bool) -> dict[str, Any]:
        entry: dict[str, Any]
        if path in self.files:
            f = self.files[path]
            entry = {"type": "file", "oid": f.blob_id, "size": f.size, "path": f.path}
            if f.sha256 is not None:
                entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": f.pointer_size}
        else:
            # A made-up tree id: the stand-in does not build git trees.
            entry = {"type": "directory", "oid": hashlib.sha1(f"tree {path}".encode()).hexdigest(), "size": 0}
            entry["path"] = path
        if expand:
            entry["lastCommit"] = {"id": LAB_REVISION, "title": "Lab model", "date": LAB_COMMIT_DATE}
        return entry

    def tree(self, under: str, recursive: bool) -> list[str] | None:
        """Paths listed under folder ``under`` ("" for the root), or None when it is no folder."""
        if under and under not in self.dirs:
            return None
        prefix = f"{under}/" if under else ""
        paths = [p for p in [*self.dirs, *self.files] if p.startswith(prefix)]
        if not recursive:
            paths = [p for p in paths if "/" not in p[len(prefix) :]]
        # Folders first, then files, each sorted, as the Hub lists them.
        return sorted(paths, key=lambda p: (p in self.files, p))

    def model_info(self, blobs: bool) -> dict[str, Any]:
        siblings = []
        for f in self.files.values():
            sibling: dict[str, Any] = {"rfilename": f.path}
            if blobs:
                sibling.update(size=f.size, blobId=f.blob_id)
                if f.sha256 is not None:
                    sibling["lfs"] = {"size": f.size, "sha256": f.sha256, "pointerSize": f.pointer_size}
            siblings.append(sibling)
        return {
            "_id": hashlib.sha1(self.repo.encode()).hexdigest()[:24],
            "id": self.repo,
            "modelId": self.repo,
            "author": self.repo.split("/")[0],
            "sha": LAB_REVISION,
            "lastModified": LAB_COMMIT_DATE,
            "createdAt": LAB_COMMIT_DATE,
            "private": False,
            "gated": False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": siblings,
        }


_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
_API_MODEL = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?/?$")
_API_TREE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)(?:/(?P<path>.*?))?/?$")
_API_PATHS_INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/paths-info/(?P<rev>[^/]+)/?$")
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def _true(values: list[str] | None) -> bool:
    return values is not None and bool(values) and values[-1].lower() in ("1", "true", "yes")


class Handler(BaseHTTPRequestHandler):
    server: HubServer
    protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects
    server_version = "rocmfleet-lab-hfhub"

    _resolve_file: str | None = None  # the repository file of a resolve request, for the log

    def handle_one_request(self) -> None:
        self._resolve_file = None  # one handler answers every request of a kept-alive connection
        super().handle_one_request()

    # -- logging: one JSON line per request, never the token ----------------------------------

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        headers = getattr(self, "headers", None)
        authorization = headers.get("Authorization", "") if headers is not None else ""
        entry: dict[str, Any] = {
            "time": time.time(),
            "method": getattr(self, "command", None),
            "path": getattr(self, "path", None),
            "client": self.client_address[0],
            "status": int(code) if str(code).isdigit() else code,
            "auth": authorization.startswith("Bearer ") and len(authorization) > len("Bearer "),
        }
        if self._resolve_file is not None:
            entry["file"] = self._resolve_file
        self.server.hub.log(entry)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass  # the JSON log is the record; nothing on stderr per request

    # -- responses -----------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(data).encode()
        self._send(status, body, {"Content-Type": "application/json; charset=utf-8", **(headers or {})})

    def _error(self, code: str | None, message: str, headers: dict[str, str] | None = None) -> None:
        extra = dict(headers or {})
        if code is not None:
            extra["X-Error-Code"] = code
        extra["X-Error-Message"] = message
        self._json(404, {"error": message}, extra)

    def _repo_and_commit(self, repo: str, rev: str | None) -> str | None:
        """The commit to serve, or None after answering 404 for an unknown repo or revision."""
        hub = self.server.hub
        if repo != hub.repo:
            self._error("RepoNotFound", "Repository not found")
            return None
        commit = hub.resolve(unquote(rev) if rev is not None else LAB_BRANCH)
        if commit is None:
            self._error("RevisionNotFound", f"Invalid rev id: {unquote(rev or '')}")
        return commit

    # -- routes --------------------------------------------------------------------------------

    def do_HEAD(self) -> None:
        self._route()

    def do_GET(self) -> None:
        self._route()

    def do_POST(self) -> None:
        """``paths-info`` (``HfApi.get_paths_info``, ``HfFileSystem``): the entries of the paths named."""
        length = int(self.headers.get("Content-Length") or 0)
        form = parse_qs(self.rfile.read(length).decode("utf-8", "replace")) if length else {}
        m = _API_PATHS_INFO.match(urlsplit(self.path).path)
        if m is None:
            self._error(None, f"Not found: {urlsplit(self.path).path}")
            return
        if self._repo_and_commit(m["repo"], m["rev"]) is None:
            return
        hub = self.server.hub
        known = [p.strip("/") for p in form.get("paths", []) if p.strip("/") in hub.files or p.strip("/") in hub.dirs]
        self._json(200, [hub.tree_entry(p, _true(form.get("expand"))) for p in known])

    def _route(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        path = url.path
        if m := _RESOLVE.match(path):
            self._resolve_file = unquote(m["path"])
            self._serve_file(m["repo"], m["rev"], self._resolve_file)
        elif path.rstrip("/") == "/api/agent-harnesses":
            self._json(200, {"standardEnvVars": [], "harnesses": {}})
        elif m := _API_TREE.match(path):
            self._serve_tree(m["repo"], m["rev"], unquote(m["path"] or "").strip("/"), query)
        elif m := _API_MODEL.match(path):
            if self._repo_and_commit(m["repo"], m["rev"]) is not None:
                self._json(200, self.server.hub.model_info(_true(query.get("blobs"))))
        else:
            self._error(None, f"Not found: {path}")

    def _serve_tree(self, repo: str, rev: str, under: str, query: dict[str, list[str]]) -> None:
        commit = self._repo_and_commit(repo, rev)
        if commit is None:
            return
        hub = self.server.hub
        expand = _true(query.get("expand"))
        paths = hub.tree(under, _true(query.get("recursive")))
        if paths is None:
            self._error("EntryNotFound", f"{under} does not exist on {rev}", {"X-Repo-Commit": commit})
            return
        size = min(hub.page_size, EXPAND_PAGE_SIZE) if expand else hub.page_size
        try:
            start = int(query.get("cursor", ["0"])[-1])
        except ValueError:
            start = 0
        page = paths[start : start + size]
        headers = {"X-Repo-Commit": commit}
        if start + size < len(paths):
            params = {k: v[-1] for k, v in query.items()}
            params["cursor"] = str(start + size)
            host = self.headers.get("Host") or f"{self.server.server_address[0]!s}:{self.server.server_address[1]}"
            headers["Link"] = f'<http://{host}{urlsplit(self.path).path}?{urlencode(params)}>; rel="next"'
        self._json(200, [hub.tree_entry(p, expand) for p in page], headers)

    def _serve_file(self, repo: str, rev: str, path: str) -> None:
        commit = self._repo_and_commit(repo, rev)
        if commit is None:
            return
        f = self.server.hub.files.get(path)
        if f is None:
            self._error("EntryNotFound", f"Entry not found: {path}", {"X-Repo-Commit": commit})
            return
        headers = {
            "X-Repo-Commit": commit,
            "ETag": f'"{f.etag}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
            "Content-Disposition": f'inline; filename="{path.rsplit("/", 1)[-1]}"',
        }
        if f.sha256 is not None:
            headers["X-Linked-Etag"] = f'"{f.sha256}"'
            headers["X-Linked-Size"] = str(f.size)
        start, end, status = 0, f.size - 1, 200
        if rng := self.headers.get("Range"):
            m = _RANGE.match(rng.strip())
            if m is None or (m[1] == "" and m[2] == ""):
                self._send(416, b"", {"Content-Range": f"bytes */{f.size}", **headers})
                return
            if m[1] == "":  # the last N bytes
                start = max(f.size - int(m[2]), 0)
            else:
                start = int(m[1])
                end = min(int(m[2]), f.size - 1) if m[2] else f.size - 1
            if start >= f.size or start > end:
                self._send(416, b"", {"Content-Range": f"bytes */{f.size}", **headers})
                return
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{f.size}"
        length = end - start + 1 if f.size else 0
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if self.command == "HEAD":
            return
        with f.disk.open("rb") as src:
            src.seek(start)
            left = length
            while left > 0:
                chunk = src.read(min(_CHUNK, left))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)


class HubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], hub: Hub) -> None:
        self.hub = hub
        super().__init__(address, Handler)


def serve(listen: str, repo: str, directory: Path, log: Path, page_size: int = PAGE_SIZE) -> HubServer:
    """A server bound to ``listen`` (``ADDR:PORT``; port 0 for any), not yet serving."""
    addr, _, port = listen.rpartition(":")
    return HubServer((addr, int(port)), Hub(repo, directory, log, page_size))


def downloads(log: Path | str) -> dict[str, dict[str, int]]:
    """Per client address, per repository file: how many GETs of its resolve URL were answered
    with the file (200 or 206; a HEAD, an error or another URL does not count)."""
    counts: dict[str, dict[str, int]] = {}
    path = Path(log)
    if not path.exists():
        return counts
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        if entry.get("method") != "GET" or "file" not in entry or entry.get("status") not in (200, 206):
            continue
        per_client = counts.setdefault(entry["client"], {})
        per_client[entry["file"]] = per_client.get(entry["file"], 0) + 1
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.lab.hfhub", description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", required=True, help="ADDR:PORT to bind (port 0: any free port)")
    parser.add_argument("--repo", default=LAB_REPO, help=f"repository id served (default {LAB_REPO})")
    parser.add_argument("--dir", required=True, type=Path, help="the repository's files")
    parser.add_argument("--log", required=True, type=Path, help="JSON lines, one per request (appended)")
    parser.add_argument("--page-size", type=int, default=PAGE_SIZE, help="tree entries per page (the Hub's: 1000)")
    args = parser.parse_args(argv)
    if not args.dir.is_dir():
        parser.error(f"--dir {args.dir}: not a directory")
    args.log.parent.mkdir(parents=True, exist_ok=True)
    server = serve(args.listen, args.repo, args.dir, args.log, args.page_size)
    host, port = str(server.server_address[0]), server.server_address[1]
    print(
        f"hfhub: {args.repo}@{LAB_REVISION} ({len(server.hub.files)} files from {args.dir}) on http://{host}:{port}",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
