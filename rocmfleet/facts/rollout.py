"""Facts about the last good version of vLLM instances (:mod:`rocmfleet.domain.lastgood`)."""

from __future__ import annotations

from pyinfra.api.facts import FactBase

from rocmfleet.domain.lastgood import LastGoodFiles, LastGoodState, last_good_state_command, parse_last_good_state


class LastGood(FactBase[LastGoodState]):
    """
    How an instance's live unit, environment and secrets files compare with their last good copies,
    and the last good version's ``serve.json`` (see :mod:`rocmfleet.domain.lastgood`).

    .. code:: python

        state = host.get_fact(LastGood, files=last_good_files(...))
        state.same, state.complete, state.image  # True, True, "repo:tag@sha256:..."
    """

    def command(self, files: LastGoodFiles) -> str:
        return last_good_state_command(files)

    def process(self, output: list[str]) -> LastGoodState:
        return parse_last_good_state(output)

    @staticmethod
    def default() -> LastGoodState:
        return parse_last_good_state([])
