"""Write ``rocmfleet/domain/vllm_serve_flags.json``: every ``vllm serve`` flag of every vLLM release
from 0.9.0 on, read from the releases' source distributions on PyPI (network; run by hand when a
vLLM release is added, and commit the JSON).

    python tools/vllm_serve_flags.py [--cache DIR]

What counts as a flag of a release (a superset is safe: an extra name is only a flag accepted that
the release lacks; a missing one would refuse a real flag, so the reading errs wide):

- every string literal shaped like a flag (``"--max-model-len"``, ``"-tp"``) in
  ``vllm/engine/arg_utils.py``, ``vllm/entrypoints/**/*.py`` and ``vllm/utils/argparse_utils.py``:
  ``add_argument("--x", ...)`` and the ``flags`` metadata of generated arguments;
- from 0.33.0, the ``--disable-x`` partner of every ``--enable-x`` flag and the reverse: vLLM's
  parser swaps ``BooleanOptionalAction`` for ``EnableDisableAction``, which pairs them
  (vllm-0.33.0 ``vllm/utils/argparse_utils.py``; applied to every such flag, on/off or not);
- ``--<field>`` for every annotated field of the argument classes in those files (a name ending in
  ``Args``, or a base whose name does: ``FrontendArgs`` and its kin, whose flags are generated from
  their fields: ``get_kwargs(cls)`` then ``add_argument(f"--{key.replace('_', '-')}")``,
  vllm-0.33.0 ``vllm/entrypoints/common/cli_args.py``; ``EngineArgs``' fields, a superset of its
  explicit flags).

The JSON maps each flag to the releases that have it, as ``[first, last]`` runs over the release
list it also holds; :mod:`rocmfleet.domain.flags` reads it.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import tarfile
import urllib.request
from pathlib import Path

from packaging.version import Version

INDEX = "https://pypi.org/pypi/vllm/json"
OUT = Path(__file__).resolve().parents[1] / "rocmfleet" / "domain" / "vllm_serve_flags.json"
FIRST = Version("0.9.0")
#: Releases rocmfleet does not know yet are left out (``rocmfleet.domain.flags`` refuses them).
BEYOND = Version("0.34.0.dev0")
FLAG = re.compile(r"-{1,2}[A-Za-z][A-Za-z0-9-]*")
SOURCES = re.compile(r"vllm/(engine/arg_utils\.py|entrypoints/.*\.py|utils/argparse_utils\.py)$")


def releases() -> list[tuple[str, str]]:
    """``(version, sdist URL)`` of every final release from :data:`FIRST` on, oldest first."""
    with urllib.request.urlopen(INDEX, timeout=60) as response:  # noqa: S310 - a fixed https URL
        data = json.load(response)
    found = []
    for version, files in data["releases"].items():
        v = Version(version)
        sdists = [f["url"] for f in files if f["packagetype"] == "sdist"]
        if FIRST <= v < BEYOND and not v.is_prerelease and sdists:
            url = sdists[0]
            found.append((version, url if url.startswith("http") else "https://pypi.org/" + url.lstrip("./")))
    return sorted(found, key=lambda item: Version(item[0]))


def _name(node: ast.expr) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def generated_fields(tree: ast.Module) -> set[str]:
    """``--<field>`` of every annotated field of the argument classes (a name ending in ``Args``, or a
    base whose name does), whose flags ``get_kwargs`` generates from their fields."""
    flags = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and (
            node.name.endswith("Args") or any(_name(b).endswith("Args") for b in node.bases)
        ):
            for item in node.body:
                if (
                    isinstance(item, ast.AnnAssign)
                    and isinstance(item.target, ast.Name)
                    and not item.target.id.startswith("_")  # private: no flag
                ):
                    flags.add("--" + item.target.id.replace("_", "-"))
    return flags


def flags_of(sdist: bytes) -> set[str]:
    """Every flag of one release's source distribution (see the module docstring)."""
    found: set[str] = set()
    paired = False
    with tarfile.open(fileobj=io.BytesIO(sdist), mode="r:gz") as tar:
        for member in tar:
            name = member.name.split("/", 1)[-1]
            if not member.isfile() or not SOURCES.match(name):
                continue
            text = tar.extractfile(member).read().decode()  # type: ignore[union-attr]
            paired = paired or "class EnableDisableAction" in text
            tree = ast.parse(text)
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and FLAG.fullmatch(node.value):
                    found.add(node.value)
            found |= generated_fields(tree)
    found = {f for f in found if not f.endswith("-")}  # fragments such as "--enable-"
    if paired:  # every on/off flag --enable-x also answers to --disable-x, and the reverse
        for prefix, inverse in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
            found |= {inverse + f.removeprefix(prefix) for f in found if f.startswith(prefix)}
    return found


def runs(present: list[bool], versions: list[str]) -> list[list[str]]:
    """``[[first, last], ...]`` of the versions where ``present`` holds."""
    out: list[list[str]] = []
    for version, here in zip(versions, present, strict=True):
        if here and out and out[-1][1] == versions[versions.index(version) - 1]:
            out[-1][1] = version
        elif here:
            out.append([version, version])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=Path("/tmp/vllm-sdists"), help="where the sdists are kept")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    per_version: dict[str, set[str]] = {}
    for version, url in releases():
        path = args.cache / f"vllm-{version}.tar.gz"
        if not path.exists():
            with urllib.request.urlopen(url, timeout=300) as response:  # noqa: S310 - PyPI's https URL
                path.write_bytes(response.read())
        per_version[version] = flags_of(path.read_bytes())
        print(f"{version}: {len(per_version[version])} flags")
    versions = list(per_version)
    every = sorted(set().union(*per_version.values()))
    table = {flag: runs([flag in per_version[v] for v in versions], versions) for flag in every}
    OUT.write_text(
        json.dumps(
            {
                "source": "tools/vllm_serve_flags.py: the sdists of vllm on PyPI",
                "releases": versions,
                "flags": table,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"{OUT}: {len(every)} flags over {len(versions)} releases")


if __name__ == "__main__":
    main()
