"""Value types shared by the models of an operator's data (profiles and host settings): image references by
Docker's grammar (:mod:`rocmfleet.domain.imageref`), and :func:`checked`, a domain rule as a pydantic validator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from pydantic.functional_validators import AfterValidator

from rocmfleet.domain import imageref


def checked(check: Callable[[str], str | None]) -> AfterValidator:
    """A pydantic validator raising the problem ``check`` finds in a value (None: no problem)."""

    def validate(value: str) -> str:
        problem = check(value)
        if problem:
            raise ValueError(problem)
        return value

    return AfterValidator(validate)


#: A repository name by Docker's reference grammar (:mod:`rocmfleet.domain.imageref`).
ImageName = Annotated[str, checked(imageref.name_problem)]
#: An image tag by Docker's reference grammar.
ImageTag = Annotated[str, checked(imageref.tag_problem)]
#: A sha256 image digest.
ImageDigest = Annotated[str, checked(imageref.digest_problem)]
