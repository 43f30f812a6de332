"""``rocmfleet plan`` as a review of a change: a ``diff`` of two checkouts' output names exactly
what a change does on each host. A copy of the 24-host test site (tests/fixtures/sites/rack24) with
the shipped ``llama-4-scout`` profile as its own, then one value of it changed in a second copy: the
diff of the two ``plan --files`` outputs holds the changed ``vllm serve`` line, the changed unit or
environment file's lines (its list line and header, which name its SHA-256, and the changed line
of its content) of the 8 hosts serving that profile, and nothing else. Every socket call refused."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest

from rocmfleet import entry, project
from rocmfleet.plan.render import FILE_HEADER
from tests.unit import test_rollout_services
from tests.unit.test_rollout_services import SCOUTS, SITE

offline = test_rollout_services.offline  # the fixture: every socket connect and name lookup refused

UNIT = "/etc/systemd/system/vllm-llama-4-scout-0.service"
ENV = "/etc/rocmfleet/vllm/llama-4-scout-0.env"


def site_with_profile(where: Path, old: str | None = None, new: str | None = None) -> Path:
    """A copy of the site at ``where`` whose ``llama-4-scout`` profile is its own copy of the shipped
    one, with the line ``old`` replaced by ``new``."""
    shutil.copytree(SITE, where)
    text = (project.PROFILES_DIR / "llama-4-scout.yml").read_text()
    if old is not None and new is not None:
        assert text.count(f"\n{old}") == 1, old
        text = text.replace(f"\n{old}", f"\n{new}")
    (where / "group_vars" / "profiles").mkdir()
    (where / "group_vars" / "profiles" / "llama-4-scout.yml").write_text(text)
    return where


def planned(site: Path, monkeypatch, capsys) -> list[str]:
    """``rocmfleet plan inventory.py --files`` run in ``site``: its lines."""
    monkeypatch.chdir(site)
    assert entry.main(["plan", "inventory.py", "--files"]) == 0
    return capsys.readouterr().out.splitlines()


def where(lines: list[str]) -> list[tuple[str, str]]:
    """``(host, part)`` of each line: ``serve`` (an instance's ``vllm serve`` line), ``listed PATH`` (a
    host's file line), ``file PATH`` (a ``--files`` header or content line) or ``other``."""
    found, host, part = [], "", "other"
    for line in lines:
        if line.startswith("host "):
            host, part = line.split()[1], "other"
        elif line.startswith(FILE_HEADER):
            host, path = line.removeprefix(FILE_HEADER).split()[:2]
            part = f"file {path}"
        elif not part.startswith("file "):
            part = "other"
        if part.startswith("file "):
            found.append((host, part))
        elif line.startswith("    vllm serve "):
            found.append((host, "serve"))
        elif line.startswith("    /"):
            found.append((host, f"listed {line.split()[0]}"))
        else:
            found.append((host, "other"))
    return found


def changed(before: list[str], after: list[str]) -> list[tuple[str, str, str, str]]:
    """``(host, part, old line, new line)`` of each line a diff of the two outputs changes."""
    at_before, at_after = where(before), where(after)
    found = []
    for tag, b1, b2, a1, a2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        assert tag == "replace" and b2 - b1 == a2 - a1, (tag, before[b1:b2], after[a1:a2])  # a value, line for line
        for i, j in zip(range(b1, b2), range(a1, a2), strict=True):
            assert at_before[i] == at_after[j]
            found.append((*at_before[i], before[i], after[j]))
    return found


@pytest.mark.parametrize(
    ("old", "new", "file", "lines"),
    [
        # the same size: only the content's SHA-256 in the list line and the header says the file changed
        ("max_num_seqs: 1024", "max_num_seqs: 2048", UNIT, [tuple(f"    --max-num-seqs {n} \\" for n in (1024, 2048))]),
        ("aiter_rmsnorm: false", "aiter_rmsnorm: true", ENV, [tuple(f"VLLM_ROCM_USE_AITER_RMSNORM={v}" for v in "01")]),
    ],
)
def test_a_profile_change_shows_as_exactly_its_lines_on_the_hosts_that_serve_it(
    old,
    new,
    file,
    lines,
    tmp_path,
    offline,
    monkeypatch,
    capsys,
):
    before = planned(site_with_profile(tmp_path / "before"), monkeypatch, capsys)
    after = planned(site_with_profile(tmp_path / "after", old, new), monkeypatch, capsys)
    found = changed(before, after)
    assert {host for host, *_ in found} == set(SCOUTS)  # the hosts serving the profile, no other
    for host in SCOUTS:
        mine = [(part, a, b) for h, part, a, b in found if h == host]
        parts = sorted(part for part, _a, _b in mine)
        serve = ["serve"] if file == UNIT else []  # an environment variable is not an argument
        assert parts == sorted([f"file {file}", f"file {file}", f"listed {file}", *serve]), mine
        header = next((a, b) for part, a, b in mine if a.startswith(FILE_HEADER))
        assert header[0].split(", sha256 ")[0] == header[1].split(", sha256 ")[0]  # only the digest differs
        content = [(a, b) for part, a, b in mine if part == f"file {file}" and not a.startswith(FILE_HEADER)]
        assert content == lines
    assert offline == []


def test_limit_by_group_plans_that_group_and_says_of_how_many(offline, monkeypatch, capsys):
    monkeypatch.chdir(SITE)
    assert entry.main(["plan", "inventory.py", "--limit", "rack_a"]) == 0
    out, err = capsys.readouterr()
    assert [line.split()[1] for line in out.splitlines() if line.startswith("host ")] == [
        f"ra-{i:02d}" for i in range(1, 9)
    ]
    assert "service llama-4-scout: 2 replica(s) on 2 host(s)" in out
    assert err.startswith("rocmfleet plan: 8 of 24 host(s) (--limit/--exclude), 2 service(s), 8 replica(s);")
    assert offline == []


def test_the_service_section_names_each_racks_image_and_each_hosts_replicas(offline, monkeypatch, capsys):
    monkeypatch.chdir(SITE)
    assert entry.main(["plan", "inventory.py"]) == 0
    out = capsys.readouterr().out
    section = out[: out.index("\nhost ")].splitlines()
    assert section[0] == "service llama-4-scout: 8 replica(s) on 8 host(s)"
    assert section[1].startswith("  replicas differ: profile llama-4-scout (8); image registry.example.invalid/vllm:")
    assert [part.rsplit(" ", 1)[1] for part in section[1].split("; image ")[1].split(", ")] == ["(2)", "(4)", "(2)"]
    pins = [line for line in section[:6] if line.startswith("  image ")]
    assert [line.split(" on ", 1)[1] for line in pins] == [
        "2 host(s) (group rack_a): ra-07, ra-08",
        "4 host(s) (group rack_b): rb-01, rb-02, rb-03, rb-04",
        "2 host(s) (group rack_c): rc-07, rc-08",
    ]
    assert pins[1].startswith("  image registry.example.invalid/vllm:0.33.0-r2@sha256:2222")
    assert (
        "  on rb-01: 1 replica(s): llama-4-scout-0 (profile llama-4-scout, "
        f"image registry.example.invalid/vllm:0.33.0-r2@sha256:{'2' * 64})" in section
    )


def test_a_replica_that_spans_hosts_is_one_line_with_its_ranks():
    from rocmfleet.plan.model import Rank, ReplicaPlan, ServiceImage, ServicePlan
    from rocmfleet.plan.render import service_text

    ranks = (Rank("h1", "big-0", 0), Rank("h2", "big-0", 1))
    replica = ReplicaPlan("big", "h1/big-0", ranks, "big", "r/i:1")
    service = ServicePlan("big", ("big",), (ServiceImage("r/i:1", ("h1", "h2")),), (replica,))
    assert service_text(service).splitlines() == [
        "service big: 1 replica(s) on 2 host(s)",
        "  profile big, image r/i:1",
        "  replica h1/big-0 on h1 (rank 0, big-0), h2 (rank 1, big-0)",
    ]


def test_replica_counts_take_a_spanning_replica_out_with_each_of_its_hosts():
    from rocmfleet.plan.model import Rank, ReplicaPlan, ServiceImage, ServicePlan
    from rocmfleet.plan.services import replica_counts

    big = ReplicaPlan("big", "h1/big-0", (Rank("h1", "big-0", 0), Rank("h2", "big-0", 1)), "big", "r/i:1")
    small = ReplicaPlan("small", "h1/small-0", (Rank("h1", "small-0", 0),), "small", "r/i:1")
    services = (
        ServicePlan("big", ("big",), (ServiceImage("r/i:1", ("h1", "h2")),), (big,)),
        ServicePlan("small", ("small",), (ServiceImage("r/i:1", ("h1",)),), (small,)),
    )
    assert replica_counts(services, ["h0", "h1", "h2"]) == {"h0": {}, "h1": {"big": 1, "small": 1}, "h2": {"big": 1}}
