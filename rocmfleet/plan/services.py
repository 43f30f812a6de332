"""Which service a host's instances serve (pure): the fleet's unit of availability.

A *service* is one served model: the name clients put in a request's ``model`` field, which is the
profile's ``served_model_name`` or, when that is empty, its ``model`` (vLLM's ``--served-model-name``
default: ``vllm/entrypoints/openai/cli_args.py``, "defaults to the model name"). Every instance of a
host is one *replica* of its profile's service (a replica that spans hosts is a later extension:
``rocmfleet.plan.model.ReplicaPlan`` carries ranks).
"""

from __future__ import annotations

from rocmfleet.config.settings import HostConfig


def service_name(config: HostConfig) -> str:
    """The service the instances of ``config`` serve: ``served_model_name`` or, if empty, ``model``
    of the host's profile (e.g. ``"meta-llama/Llama-3.3-70B-Instruct"``)."""
    profile = config.profile
    return profile.served_model_name or profile.model


def replicas(config: HostConfig) -> list[tuple[str, str]]:
    """``(service, instance name)`` of every instance of ``config``, in the host's instance order:
    each instance is one replica of its service."""
    service = service_name(config)
    return [(service, instance.name) for instance in config.instances()]
