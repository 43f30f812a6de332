"""Host data's ``vllm_env`` under the environment policy (:mod:`rocmfleet.domain.envpolicy`) and the
flag table's rules for a variable from another source
(:func:`rocmfleet.domain.flagrender.env_passthrough_problems`).

Apart from the policy so that the policy does not stack on the flag rendering: a profile's own checks
(:func:`rocmfleet.domain.envpolicy.profile_problems`) need the policy only, a host's data both.
"""

from __future__ import annotations

from collections.abc import Mapping

from rocmfleet.domain.envpolicy import EnvProfile, is_secret, owned_problem
from rocmfleet.domain.flagrender import env_passthrough_problems


def host_problems(profile: EnvProfile, vllm_env: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """Every rule ``vllm_env`` breaks, as ``(key, message, value)`` with key ``vllm_env.<NAME>``;
    a secret's value is shown as ``*MASKED*``.

    Args:
        profile: the host's profile (:class:`~rocmfleet.domain.envpolicy.EnvProfile`: its vLLM
            version, env sets and tensor parallel size).
        vllm_env: host data's ``vllm_env``, ``{NAME: value}``.

    Raises:
        FlagError: the profile's ``vllm_version`` is not one the flag table knows.
    """
    problems: list[tuple[str, str, str]] = []
    table = {
        line.split(":", 1)[0].split()[-1]: line
        for line in env_passthrough_problems(list(vllm_env), profile.vllm_version, "vllm_env")
    }
    for name, value in vllm_env.items():
        key = f"vllm_env.{name}"
        if is_secret(name, value):
            problems.append(
                (
                    key,
                    "looks like a secret: put it in vllm_secret_env as a vault value (rocmfleet vault encrypt-string)",
                    "*MASKED*",
                )
            )
        elif why := owned_problem(profile, name, value, "vllm_env") or table.get(name):
            problems.append((key, why.split(": ", 1)[1], repr(value)))
    return problems
