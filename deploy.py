"""Converge hosts to serving vLLM: ``pyinfra inventories/<fleet>.py deploy.py`` (see :mod:`rocmfleet.converge`)."""

from rocmfleet.converge import converge

converge()
