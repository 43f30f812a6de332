"""A profile's model in the host's Hugging Face cache: staged once per host, then read offline.

Eight instances starting together on one empty cache would each download the model into it (and
on a shared filesystem every host's instances would): concurrent writers race on the same blobs and
``.incomplete`` files. So the vllm role stages the model once per host, before any instance is
(re)started (``rocmfleet/scripts/model-stage.sh``: one ``hf download`` in a container of the
instance's own image, under a lock, marked done by a stamp file), and every instance mounts the
cache read-only with ``HF_HUB_OFFLINE=1`` and ``--revision``: vLLM then loads exactly the staged
snapshot and never writes to the cache.

Upstream, what this relies on (huggingface_hub 2.4.0 and vLLM 0.32.0, as in the lab's image):

- the cache layout ``<HF_HUB_CACHE>/models--<org>--<name>/snapshots/<commit>/`` and
  ``refs/<branch>``: ``huggingface_hub/file_download.py`` ``repo_folder_name`` (L747-755,
  ``REPO_ID_SEPARATOR = "--"``, ``constants.py`` L110) and ``_cache_commit_hash_for_specific_revision``;
  https://huggingface.co/docs/huggingface_hub/guides/manage-cache ("Understand caching");
- ``HF_HUB_CACHE`` defaults to ``$HF_HOME/hub`` and ``HF_HUB_OFFLINE=1`` forbids every hub call
  (``huggingface_hub/constants.py`` L160-194);
- with ``HF_HUB_OFFLINE`` vLLM replaces a hub id by its local snapshot for ``--revision``
  (``vllm/engine/arg_utils.py`` L907-914, ``vllm/transformers_utils/repo_utils.py`` ``get_model_path``
  L286-304), and the tokenizer's revision defaults to the model's (``vllm/config/model.py`` L598-599),
  so ``--revision`` alone pins both.

Pure: no SSH.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: A model repository commit: 40 lowercase hex (a git SHA-1, as the hub's ``X-Repo-Commit`` and the
#: snapshot folders name it).
REVISION_PATTERN = r"^[0-9a-f]{40}$"
#: What an unpinned hub model is staged at (``revision_unpinned: true``): the repository's default branch.
DEFAULT_BRANCH = "main"
#: Where the instances (and the staging container) see the host's cache: root's default ``HF_HOME``
#: (``~/.cache/huggingface``, huggingface_hub ``constants.py`` L160).
CONTAINER_HF_HOME = "/root/.cache/huggingface"
#: ``HF_HUB_CACHE`` inside the containers, given explicitly so that an image's own ``HF_HOME`` does not move it.
CONTAINER_HUB_CACHE = f"{CONTAINER_HF_HOME}/hub"
#: Files the staging leaves out: Meta's repositories carry their original ``consolidated.*.pth``
#: checkpoint under ``original/`` beside the safetensors vLLM loads (Llama 3.3 70B: about as large
#: again); vLLM's own download fetches only the weight format it loads (``vllm/model_executor/model_loader/
#: default_loader.py`` L176-193: ``allow_patterns`` ``*.safetensors``).
EXCLUDE = ("original/*",)
#: The host's copy of the secrets (``vllm_secret_env``: ``HF_TOKEN``) the staging container reads
#: with ``--env-file`` (0600, root's, in the 0700 config directory); removed after a successful staging.
STAGE_SECRETS_FILE = "/etc/rocmfleet/vllm/model-stage.secrets"
#: Where the deploy installs ``model-stage.sh`` (beside the units' scripts, ``rocmfleet.domain.vllm.SCRIPT_DIR``).
STAGE_SCRIPT = "model-stage.sh"


#: Where transformers copies a model's own code (``trust_remote_code`` with an ``auto_map``, e.g.
#: DeepSeek-V3's ``configuration_deepseek.py``) to import it: by default ``$HF_HOME/modules``
#: (``transformers/utils/hub.py`` L108, ``dynamic_module_utils.py`` ``init_hf_modules`` L85-98 makes
#: it), inside the read-only mount; the container's own writable ``/tmp`` instead.
CONTAINER_MODULES_CACHE = "/tmp/hf_modules"


def cache_volume(host_dir: str) -> str:
    """``docker run --volume`` of the host's cache, read-only, where huggingface_hub looks in a
    container (:data:`CONTAINER_HF_HOME`): the instances' and the benchmark client's mount."""
    return f"{host_dir}:{CONTAINER_HF_HOME}:ro"


def offline_env() -> dict[str, str]:
    """The instances' Hugging Face variables: the cache where the staging put it, no hub call
    (``HF_HUB_OFFLINE=1``: the cache is mounted read-only, a download could not land anyway), and
    transformers' remote-code modules outside the read-only mount (:data:`CONTAINER_MODULES_CACHE`)."""
    return {"HF_HUB_CACHE": CONTAINER_HUB_CACHE, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": CONTAINER_MODULES_CACHE}


#: Variables :func:`offline_env` renders, which ``vllm_env`` and ``extra_env`` may not set
#: (``HF_HOME`` would move the cache away from the mount).
OWNED_ENV = ("HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_MODULES_CACHE")


def is_local(model: str) -> bool:
    """Whether ``model`` is a path inside the container (``/opt/models/x``), not a hub id: no staging, no revision."""
    return model.startswith("/")


#: A hub repository id as huggingface_hub's ``validate_repo_id`` accepts it (``huggingface_hub/utils/
#: _validators.py``: ``REPO_ID_REGEX``, at most 96 characters, no ``--`` or ``..``): ``[org/]name``, each
#: part letters, digits, ``_``, ``-`` and ``.``, starting and ending with a letter, digit or ``_``.
HUB_ID_PATTERN = r"^([A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?/)?[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$"
#: huggingface_hub's longest repository id.
HUB_ID_MAX = 96


def hub_id_problem(model: str) -> str | None:
    """Why ``model`` (not a path: it does not start with ``/``) is no Hugging Face repository id,
    or ``None``. The id reaches the cache's folder name (:func:`repo_folder`), the stamp's path and
    ``hf download``'s arguments, so ``org/name/extra``, ``../x``, spaces or shell characters are
    refused here rather than met on the host."""
    if is_local(model):
        return None
    if len(model) > HUB_ID_MAX or re.fullmatch(HUB_ID_PATTERN, model) is None or "--" in model or ".." in model:
        return (
            "not a Hugging Face repository id: [org/]name, each part letters, digits, '_', '-' and '.' "
            f"(starting and ending with a letter, digit or '_', no '--' or '..'), at most {HUB_ID_MAX} "
            "characters; or an absolute path inside the container (/opt/models/x)"
        )
    return None


def is_revision(value: str) -> bool:
    """Whether ``value`` is a full commit SHA (:data:`REVISION_PATTERN`)."""
    return re.fullmatch(REVISION_PATTERN, value) is not None


def repo_folder(model: str) -> str:
    """``models--<org>--<name>``: the model's folder in the hub cache (huggingface_hub ``repo_folder_name``)."""
    return "--".join(["models", *model.split("/")])


@dataclass(frozen=True)
class Staged:
    """One model to have in a host's cache before its instances start.

    Attributes:
        model: the hub id (``org/name``).
        revision: the commit (40 hex), or :data:`DEFAULT_BRANCH` for a profile that says
            ``revision_unpinned: true``.
        cache_dir: the host's cache (``vllm_hf_cache_dir``), absolute.
        image: the image whose own ``hf``/``huggingface-cli`` downloads it (the instances' image, by digest).
    """

    model: str
    revision: str
    cache_dir: str
    image: str

    @property
    def present(self) -> str:
        """What exists once huggingface_hub has the revision: ``snapshots/<commit>`` for a commit,
        ``refs/<branch>`` (the file naming its commit) for a branch."""
        base = f"{self.cache_dir}/hub/{repo_folder(self.model)}"
        return f"{base}/snapshots/{self.revision}" if is_revision(self.revision) else f"{base}/refs/{self.revision}"

    @property
    def stamp(self) -> str:
        """The file ``model-stage.sh`` writes once the download finished:
        ``<cache>/rocmfleet-staged/models--<org>--<name>/<revision>``. Outside ``hub/``, so that the
        cache stays as huggingface_hub lays it out (``hf cache scan`` reads only ``hub/``)."""
        return f"{self.cache_dir}/rocmfleet-staged/{repo_folder(self.model)}/{self.revision}"

    def script_args(self) -> list[str]:
        """``model-stage.sh`` arguments: ``CACHE_DIR MODEL REVISION IMAGE SECRETS_FILE EXCLUDE...``."""
        return [self.cache_dir, self.model, self.revision, self.image, STAGE_SECRETS_FILE, *EXCLUDE]


def staged(model: str, revision: str | None, cache_dir: str, image: str) -> Staged | None:
    """What to stage for a profile's ``model`` at ``revision`` (``None``: unpinned, its default branch),
    or ``None`` for a local path (the model is in the image or a mount: nothing to fetch)."""
    if is_local(model):
        return None
    return Staged(model, revision or DEFAULT_BRANCH, cache_dir, image)


def container_snapshot(model: str, revision: str | None) -> str | None:
    """Where a pinned revision of a hub model lies inside a container that mounts the cache
    (``/root/.cache/huggingface/hub/models--<org>--<name>/snapshots/<commit>``), for a client that
    must load its tokenizer offline from exactly the staged revision (``vllm bench serve
    --tokenizer``: without it, transformers asks for ``main``, which an offline cache staged by
    commit has no ``refs/`` entry for). ``None`` for a local path or an unpinned model (staged at
    ``main``, so ``refs/main`` exists).

    **Example:** ``container_snapshot("Qwen/Qwen3-30B-A3B", "ad44...")`` ->
    ``/root/.cache/huggingface/hub/models--Qwen--Qwen3-30B-A3B/snapshots/ad44...``
    """
    if is_local(model) or revision is None or not is_revision(revision):
        return None
    return f"{CONTAINER_HUB_CACHE}/{repo_folder(model)}/snapshots/{revision}"


def revision_problem(model: str, revision: str | None, unpinned: bool) -> str | None:
    """Why a profile's ``model``/``revision``/``revision_unpinned`` are refused, or ``None``.

    A hub model needs its commit (``revision``): without one every host, and every restart,
    resolves the repository's branch anew and may load other weights than the rest of the fleet.
    ``revision_unpinned: true`` says that is wanted (staged once at :data:`DEFAULT_BRANCH`).
    A local path has no revision.
    """
    if is_local(model):
        if revision is not None or unpinned:
            return f"revision: model {model!r} is a path in the container, which has no revision; drop the key"
        return None
    if revision is not None and unpinned:
        return "revision: given with revision_unpinned: true; give one of them"
    if revision is None and not unpinned:
        return (
            f"revision: missing for the Hugging Face model {model!r}: pin the repository commit (40 hex: "
            f"huggingface_hub.model_info({model!r}).sha, or the X-Repo-Commit header of "
            f"https://huggingface.co/{model}/resolve/main/config.json), or set revision_unpinned: true "
            "to serve whatever its main branch holds when a host first stages it"
        )
    return None
