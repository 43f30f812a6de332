"""Where the deploy's files live: the checkout that holds ``deploy.py``, ``roles/``, ``templates/``
and ``group_vars/profiles/``.

These are not package data yet (a wheel carries only ``rocmfleet/``); every module that needs
one of them takes its path from here, so that packaging them changes one line.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEPLOY_FILE = ROOT / "deploy.py"
TEMPLATES_DIR = ROOT / "templates"
PROFILES_DIR = ROOT / "group_vars" / "profiles"
