"""``rocmfleet -v``: the log of the commands run on hosts (:data:`COMMAND_LOG_ENV`, one JSON line per command,
appended by :meth:`rocmfleet.fleet.connect.Session.run`), told as it grows (:func:`told_commands`)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator

#: Environment variable naming a file to which every command run through a :class:`Session` is
#: appended, one JSON line each (``measure/converge.py`` counts a check's commands per host with
#: it). Commands carry no secrets (those go on stdin), and each line holds at most the first
#: :data:`LOG_COMMAND_CHARS` characters of one.
COMMAND_LOG_ENV = "ROCMFLEET_COMMAND_LOG"
LOG_COMMAND_CHARS = 120


@contextlib.contextmanager
def told_commands(emit: Callable[[str], None], poll_s: float = 0.2) -> Iterator[None]:
    """``rocmfleet -v``: while the block runs, every command run on a host through a :class:`Session`
    (in this process or a child, such as the check's workers: the log is an inherited environment
    variable) is passed to ``emit`` once it ends, as one line: host, seconds, exit status, the
    command's first :data:`LOG_COMMAND_CHARS` characters with white space folded.

    It tails the :data:`COMMAND_LOG_ENV` file (a private temporary one unless one is set already,
    then from its current end) in a thread, and tells what is left when the block ends.
    """
    import tempfile
    import threading

    own = None
    path = os.environ.get(COMMAND_LOG_ENV)
    if not path:
        fd, own = tempfile.mkstemp(prefix="rocmfleet-commands-", suffix=".jsonl")
        os.close(fd)
        path = os.environ[COMMAND_LOG_ENV] = own
    stop = threading.Event()

    def tell(text: str) -> None:
        try:
            line = json.loads(text)
        except ValueError:
            return
        status = "timed out or broke" if line.get("exit") is None else f"exit {line['exit']}"
        emit(f"[{line.get('where')}] {line.get('s', 0):.2f} s, {status}: {' '.join(str(line.get('command')).split())}")

    log = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - closed when the block ends
    log.seek(0, os.SEEK_END)  # from now on: not what an operator's own log held before

    def follow() -> None:
        pending = ""
        while True:
            done = stop.is_set()  # read once more after the block ended: its last lines too
            pending += log.read()
            *complete, pending = pending.split("\n")
            for text in complete:
                tell(text)
            if done:
                return
            stop.wait(poll_s)

    thread = threading.Thread(target=follow, name="told-commands", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
        log.close()
        if own is not None:
            os.environ.pop(COMMAND_LOG_ENV, None)
            with contextlib.suppress(OSError):
                os.unlink(own)
