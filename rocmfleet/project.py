"""Where the deploy's files live: inside the installed package (``pip install`` carries them).

``PACKAGE`` holds ``templates/`` (what the roles render), ``profiles/`` (the shipped vLLM
profiles), ``skeleton/`` (what ``rocmfleet init`` writes) and ``deploy.py`` (the deploy file
``rocmfleet rollout`` and ``restart`` hand to pyinfra). Template paths in the code are relative to
``PACKAGE`` (``templates/vllm/vllm.service.j2``). In a checkout, ``rocmfleet/templates`` and
``rocmfleet/roles`` are links to the repository's top-level ``templates/`` and ``roles/``; the wheel
holds the files themselves (``docs/layout.md``).
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
DEPLOY_FILE = PACKAGE / "deploy.py"
TEMPLATES_DIR = PACKAGE / "templates"
PROFILES_DIR = PACKAGE / "profiles"
SKELETON_DIR = PACKAGE / "skeleton"
