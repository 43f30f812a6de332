# PYTHON_ARGCOMPLETE_OK (argcomplete: `eval "$(register-python-argcomplete rocmfleet)"` completes the command)
"""The ``rocmfleet`` console script: imports the CLI under a guard, so that Ctrl-C while the
modules load (about 0.4 s: pyinfra, pydantic, ansible-core's vault) ends like any other
interruption, with one line and exit status 130, not a traceback.

.. code:: console

    $ rocmfleet status inventories/prod.py   # ^C at once
    rocmfleet: interrupted while starting; nothing was done
"""

from __future__ import annotations

import sys

#: Exit status of a command ended by Ctrl-C (128 + SIGINT), as :mod:`rocmfleet.cli` uses.
INTERRUPTED = 130
#: Exit status when standard output is closed (``>&-``): as for a pipe whose reader ended (128 +
#: SIGPIPE, :data:`rocmfleet.cli.common.EXIT_PIPE_CLOSED`).
STDOUT_CLOSED = 141


def main() -> int:
    """Run :func:`rocmfleet.cli.main` with ``sys.argv``; 130 when interrupted before it starts; 141
    when standard output is closed (Python then sets ``sys.stdout`` to ``None``, and pyinfra's
    import reads ``sys.stdout.isatty()``): nothing is done, one line on standard error."""
    if sys.stdout is None:
        if sys.stderr is not None:
            print("rocmfleet: standard output is closed; nothing was done", file=sys.stderr)
        return STDOUT_CLOSED
    try:
        from rocmfleet.cli import main as cli_main
    except KeyboardInterrupt:
        print("\nrocmfleet: interrupted while starting; nothing was done", file=sys.stderr)
        return INTERRUPTED
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
