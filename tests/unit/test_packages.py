"""``packages.held_at`` (given facts, the commands it yields) and the Docker version pattern."""

from __future__ import annotations

import pytest
from pyinfra.api import FunctionCommand
from pyinfra.facts.apt import noninteractive_apt

from rocmfleet.domain import docker
from rocmfleet.facts.packages import HeldPackages
from rocmfleet.facts.rocm import AptRepoVersions, InstalledVersions

DEBIAN = "http://deb.debian.org/debian bookworm/main amd64 Packages"
APT = str(noninteractive_apt("")).strip()  # pyinfra's own apt-get prefix


class FakeHost:
    """Answers facts from ``facts`` ({fact class: answer}); records noops."""

    def __init__(self, facts: dict) -> None:
        self.facts, self.noops = facts, []

    def get_fact(self, fact, **_kwargs):
        return self.facts[fact]

    def noop(self, message: str) -> None:
        self.noops.append(message)


@pytest.fixture
def held_at(monkeypatch):
    from rocmfleet.operations import packages

    def run(facts: dict, pkgs: list[str], version: str) -> tuple[list, FakeHost]:
        fake = FakeHost(facts)
        monkeypatch.setattr(packages, "host", fake)
        return list(packages.held_at._inner(pkgs, version)), fake

    return run


def test_a_held_package_at_a_matching_version_is_a_noop(held_at):
    facts = {InstalledVersions: {"docker.io": "20.10.24+dfsg1-1+deb12u1+b6"}, HeldPackages: ["docker.io"]}
    commands, fake = held_at(facts, ["docker.io"], "20.10.24+dfsg1-*")
    assert commands == [] and fake.noops == ["docker.io at 20.10.24+dfsg1-*, held"]


def test_a_missing_package_is_installed_at_the_newest_match_then_held(held_at):
    offered = {"docker.io": [("26.1.5+dfsg1-9", DEBIAN), ("20.10.24+dfsg1-1+deb12u1+b6", DEBIAN)]}
    facts = {InstalledVersions: {}, AptRepoVersions: offered, HeldPackages: []}
    commands, _ = held_at(facts, ["docker.io"], "20.10.24+dfsg1-*")
    assert [str(c) for c in commands] == [
        f"{APT} install --no-install-recommends --allow-downgrades --allow-change-held-packages "
        "docker.io=20.10.24+dfsg1-1+deb12u1+b6",
        "apt-mark hold docker.io",
    ]


def test_an_installed_package_at_another_version_moves_and_stays_held(held_at):
    offered = {
        "docker-ce": [("5:28.0.1-1~debian.12~bookworm", DEBIAN), ("5:27.5.1-1~debian.12~bookworm", DEBIAN)],
        "docker-ce-cli": [("5:28.0.1-1~debian.12~bookworm", DEBIAN), ("5:27.5.1-1~debian.12~bookworm", DEBIAN)],
    }
    installed = {"docker-ce": "5:28.0.1-1~debian.12~bookworm", "docker-ce-cli": "5:27.5.1-1~debian.12~bookworm"}
    facts = {InstalledVersions: installed, AptRepoVersions: offered, HeldPackages: ["docker-ce", "docker-ce-cli"]}
    commands, _ = held_at(facts, ["docker-ce", "docker-ce-cli"], "5:27.5.1-*")
    assert [str(c) for c in commands] == [
        f"{APT} install --no-install-recommends --allow-downgrades --allow-change-held-packages "
        "docker-ce=5:27.5.1-1~debian.12~bookworm"
    ]


def test_a_version_apt_does_not_offer_fails_the_host_naming_what_it_offers(held_at):
    offered = {"docker.io": [("20.10.24+dfsg1-1+deb12u1+b6", DEBIAN)]}
    facts = {InstalledVersions: {}, AptRepoVersions: offered, HeldPackages: []}
    commands, _ = held_at(facts, ["docker.io"], "27.*")
    assert len(commands) == 1 and isinstance(commands[0], FunctionCommand)
    offered_text = "{'docker.io': ['20.10.24+dfsg1-1+deb12u1+b6']}"
    assert commands[0].args[0] == f"rocmfleet: no version matching '27.*' offered for {offered_text} (name: offered)"


def test_held_packages_fact_reads_apt_mark():
    fact = HeldPackages()
    assert (
        fact.command(["docker-ce", "docker-ce-cli"]) == "apt-mark showhold docker-ce docker-ce-cli 2>/dev/null || true"
    )
    assert fact.process(["docker-ce-cli", "", "docker-ce"]) == ["docker-ce", "docker-ce-cli"]


@pytest.mark.parametrize(
    ("apt_version", "server"),
    [
        ("5:27.5.1-1~debian.12~bookworm", "27.5.1"),
        ("20.10.24+dfsg1-*", "20.10.24+dfsg1"),
        ("5:27.5.*", "27.5.*"),
        ("27.5.1", "27.5.1"),
    ],
)
def test_server_version_is_the_upstream_part(apt_version, server):
    assert docker.server_version_pattern(apt_version) == server
