"""What the checks expect, from the inventory data given as JSON in ``ROCMFLEET_CHECK_DATA``.

The same data a deploy validates (``rocm_*`` and ``tuning_*`` keys); absent keys take AMD's
defaults, so with no variable set the checks expect a default deploy.
"""

from __future__ import annotations

import json
import os

from rocmfleet.rocm import RocmSettings, rocm_settings_for
from rocmfleet.tuning import TuningSettings, tuning_settings_for

ENV = "ROCMFLEET_CHECK_DATA"


def data() -> dict:
    return json.loads(os.environ.get(ENV, "{}"))


def rocm_settings() -> RocmSettings:
    return rocm_settings_for("(checks)", data())


def tuning_settings() -> TuningSettings:
    return tuning_settings_for("(checks)", data())


def in_container(host) -> bool:
    """True on a container host: it shares another machine's kernel, CPUs and boot."""
    return host.run("systemd-detect-virt --container").rc == 0
