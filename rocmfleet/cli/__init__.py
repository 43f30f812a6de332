"""The ``rocmfleet`` command's modules, one per command (``init``, ``validate``, ``plan``, ``check``,
``bench``, ``rollout`` for ``rollout`` and ``restart``, ``status``, ``metrics``, ``cache``, ``vault``,
``schema``), and ``common`` for what they share. The console script, :mod:`rocmfleet.entry`, builds
the parser from them and runs one; this package gathers nothing, so that a command's module is one
level below the console script.
"""
