"""The packaged deploy file: ``rocmfleet rollout`` and ``restart`` hand it to pyinfra.

Never imported (pyinfra executes it once per host); an operator's ``deploy.py`` is the same two lines.
"""

from rocmfleet.converge import converge

converge()
