from __future__ import annotations

import pytest

from rocmfleet.domain.systemd import exec_line, quote_word


@pytest.mark.parametrize(
    ("word", "quoted"),
    [
        ("/usr/bin/docker", "/usr/bin/docker"),
        ("--shm-size", "--shm-size"),
        ('{"full_cuda_graph":true}', '"{\\"full_cuda_graph\\":true}"'),
        ("50%", "50%%"),
        ("$HOME", "$$HOME"),
        ("a b", '"a b"'),
        ("", '""'),
    ],
)
def test_quote_word(word, quoted):
    assert quote_word(word) == quoted


def test_exec_line_keeps_options_with_their_values():
    line = exec_line(["/usr/bin/docker", "run", "--rm", "--name", "x", "img", "--port", "8000"])
    assert line.split(" \\\n    ") == ["/usr/bin/docker run", "--rm", "--name x", "img", "--port 8000"]


def test_exec_line_keeps_the_command_after_a_double_dash_together():
    line = exec_line(["/s.sh", "run", "c", "--", "/usr/bin/docker", "run", "--detach", "--name", "x", "img"])
    assert line.split(" \\\n    ") == ["/s.sh run c", "-- /usr/bin/docker run", "--detach", "--name x", "img"]
