"""A service's base URL in host data, checked once: ``http(s)://host[:port][/path]``.

rocmfleet appends paths to such a URL (the Hub endpoint's ``/api/...``, Prometheus's
``/api/v1/query``), so a query or fragment would land before them; it is plain text (host data,
``--dry`` lines, reports), so it holds no credentials.

Example::

    problem("http://u:p@prom:9090", "http://prometheus:9090", "the report says it", "/api/v1/query is appended")
    # 'holds credentials (user:password@): ...'
"""

from __future__ import annotations

from urllib.parse import urlsplit


def problem(value: str, example: str, credentials: str, appended: str) -> str | None:
    """Why ``value`` is not an ``http(s)://host[:port][/path]`` base URL, or ``None``.

    Args:
        value: the setting's value.
        example: a good value, said with every problem (``allowed: ..., e.g. EXAMPLE``).
        credentials: why ``user:password@`` is refused, and where credentials go instead.
        appended: what is appended to the URL, said when it holds a query or fragment.

    The port is ``urllib.parse``'s (out of 0-65535 or not a number: "not a URL"); port 0 is no port.
    """
    allowed = f"allowed: http(s)://host[:port][/path], e.g. {example}"
    if any(c.isspace() or not c.isprintable() for c in value):
        return f"must not hold white space or control characters; {allowed}"
    try:
        parts = urlsplit(value)
        port = parts.port  # ValueError when out of 0-65535 or not a number
    except ValueError as err:
        return f"not a URL ({err}); {allowed}"
    if parts.scheme not in ("http", "https"):
        return f"scheme {parts.scheme or '(none)'!r} is not http or https; {allowed}"
    if "@" in parts.netloc:
        return f"holds credentials (user:password@): {credentials}; {allowed}"
    if not parts.hostname:
        return f"names no host; {allowed}"
    if port == 0:
        return f"port 0 is no port; {allowed}"
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        return f"must not hold a query or fragment ({appended}); {allowed}"
    return None


def hub_endpoint_problem(value: str) -> str | None:
    """Why ``value`` is not a Hub endpoint for ``HF_ENDPOINT`` (``vllm_hf_endpoint``), or ``None``:
    ``http(s)://host[:port][/path]``. Credentials (``user:password@``) are refused: the setting is
    plain text (host data, ``--dry`` lines); the token goes in ``vllm_secret_env`` ``HF_TOKEN``.
    A query or fragment is refused too: huggingface_hub appends ``/api/...`` and ``/<repo>/resolve/...``
    to the endpoint (``huggingface_hub/constants.py`` ``HUGGINGFACE_CO_URL_TEMPLATE``)."""
    return problem(
        value,
        "https://hf-mirror.example.com",
        "this setting is plain text; give the Hub token as vllm_secret_env HF_TOKEN (a vault value)",
        "huggingface_hub appends paths to it",
    )
