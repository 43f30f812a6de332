"""HostSteps' reading of a command's end: which failures are the host's (inconclusive), not the image's."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmfleet.fleet.connect import Result
from rocmfleet.fleet.rollout.hoststeps import HostSteps
from rocmfleet.fleet.rollout.steps import StepError


class _Held:
    """A held session whose every command ends as ``result``."""

    def __init__(self, result: Result) -> None:
        self.result = result

    def run(self, command: str, timeout_s: float, stdin: str | None = None) -> Result:
        return self.result


def _steps(result: Result, tmp_path: Path) -> HostSteps:
    steps = HostSteps("inventory.py", {}, tmp_path, "r1")
    steps._held["lab-3"] = _Held(result)  # type: ignore[assignment]
    return steps


def test_a_session_ended_with_no_exit_status_is_the_hosts_not_the_images(tmp_path):
    """A host powering off kills sshd's session under the command: paramiko reports -1 (no
    exit status sent). The gate could not run: inconclusive (retried, then paused), never a
    failure that rolls back (CI, 2026-12-05: lab-3 powered off while it switched was rolled back)."""
    steps = _steps(Result(-1, b"", b""), tmp_path)
    with pytest.raises(StepError) as caught:
        steps.run("lab-3", "vllm-status.sh", 60, "switch")
    assert caught.value.inconclusive and caught.value.gate == "switch"
    assert "no exit status" in str(caught.value), caught.value


@pytest.mark.parametrize("status", [0, 1, 255])
def test_a_command_with_an_exit_status_is_returned_as_it_ended(tmp_path, status):
    result = Result(status, b"out", b"err")
    assert _steps(result, tmp_path).run("lab-3", "true", 60, "switch") is result
