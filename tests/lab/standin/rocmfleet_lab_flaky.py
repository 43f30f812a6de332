"""rocmfleet lab: a vLLM that answers one in three completions asking for logprobs with HTTP 500.

The bad version ``0.32.0-lab.flaky`` of the lab image (tests/lab/image.py) loads this module with
``vllm serve ... --middleware rocmfleet_lab_flaky.Passthrough``: vLLM imports a middleware's
module in its API server process (vllm/entrypoints/serve/middleware/register.py), and the import
wraps ``OpenAIServingCompletion.create_completion`` (vllm/entrypoints/openai/completion/serving.py).
A regression on a path the smoke benchmark does not take: the readiness probe and the benchmark
ask for no logprobs, so the version is ready and passes its gate; a client's requests with
logprobs fail a third of the time. The 500 is the route's own error answer (an ``ErrorResponse``
of the serving class, as an engine error gives), inside vLLM's HTTP instrumentator, so the
instance's ``http_requests_total{status="5xx"}`` counts it, as it would count a real failure.
"""

from __future__ import annotations

import itertools
from http import HTTPStatus
from typing import Any

from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion

_original = OpenAIServingCompletion.create_completion
_asked = itertools.count(1)


async def _create_completion(self: Any, request: Any, raw_request: Any = None) -> Any:
    if getattr(request, "logprobs", None) is not None and next(_asked) % 3 == 0:
        return self.create_error_response(
            "rocmfleet lab: this version fails one in three completions that ask for logprobs",
            err_type="InternalServerError",
            status_code=HTTPStatus.INTERNAL_SERVER_ERROR,
        )
    return await _original(self, request, raw_request)


OpenAIServingCompletion.create_completion = _create_completion  # type: ignore[method-assign]


class Passthrough:
    """The middleware vLLM is given: it changes nothing (the module's import did the work)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)
