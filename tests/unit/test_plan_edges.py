"""Edges of the offline commands (``rocmfleet plan``, ``rollout --dry``) an operator can hit: a
closed pipe, a service of mixed shapes, a host whose image another group pins, odd ``--topology``
files, every problem at once, a vault without its password."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RACK24 = ROOT / "tests" / "fixtures" / "sites" / "rack24" / "inventory.py"


def test_a_reader_that_stops_early_gets_no_traceback_and_exit_141():
    # `rocmfleet plan ... | head -1`: the pipe's reader goes away after one line
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from rocmfleet.entry import main; sys.argv[0] = 'rocmfleet'; raise SystemExit(main())",
            "plan",
            str(RACK24),
            "--files",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # the reader is gone before the plan is written, as `| head -1` once it has its line
    err = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err
    assert err.endswith("rocmfleet: plan: standard output was closed (its reader ended): output cut short\n"), err
