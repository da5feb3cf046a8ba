"""Passwords in addresses (issue 18): ``sftp://user:secret@host`` is refused by the one address
parser, so no command stores it in the queue or a site, or prints it: exit 2 and one line that
points to saved sites and the keychain."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.core.address import parse_address
from ferry.core.errors import UsageError
from helpers import Ferry, describe

SECRET = "hunter2-Zq9"
ADDRESSES = [
    f"sftp://alice:{SECRET}@127.0.0.1/data/",
    f"sftp://alice:{SECRET}@127.0.0.1:2222/~/data/",
    f"s3://AKIAEXAMPLE:{SECRET}@bucket/key",
    f"alice:{SECRET}@127.0.0.1:/data/",  # scp's shape, with a password it never takes
]


@pytest.mark.parametrize("text", ADDRESSES)
def test_parser_refuses_a_password_without_repeating_it(text: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_address(text)
    message = str(caught.value)
    assert SECRET not in message and "ferry sites" in message and "keychain" in message
    assert "\n" not in message


def test_user_without_password_still_parses() -> None:
    a = parse_address("sftp://alice@127.0.0.1:2222/data")
    assert (a.user, a.host, a.port, a.path) == ("alice", "127.0.0.1", 2222, "/data")
    assert parse_address("sftp://[::1]:22/x").host == "::1"


@pytest.mark.parametrize(
    "command",
    [
        ["cp", "{src}", ADDRESSES[0]],
        ["cp", ADDRESSES[0] + "f.txt", "{dst}"],
        ["queue", "add", "{src}", ADDRESSES[1]],
        ["queue", "add", "{src}", ADDRESSES[2]],
        ["ls", ADDRESSES[0]],
        ["sites", "add", "lab", ADDRESSES[0]],
        ["watch", "{tmp}", ADDRESSES[0]],
    ],
)
def test_no_command_stores_or_prints_a_password(ferry: Ferry, tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "f.txt").write_bytes(b"x")
    args = [c.format(src=tmp_path / "f.txt", dst=tmp_path / "out", tmp=tmp_path) for c in command]
    res = ferry(*args, timeout=60)
    assert res.returncode == 2, describe(res)
    assert SECRET not in res.stdout + res.stderr, describe(res)
    assert "ferry sites" in res.stderr and len(res.stderr.strip().splitlines()) == 1, describe(res)
    assert ferry.jobs() == []
    for stored in (tmp_path / "data").rglob("*"):
        if stored.is_file():
            assert SECRET.encode() not in stored.read_bytes(), stored
    for saved in (tmp_path / "config").rglob("*"):
        if saved.is_file():
            assert SECRET.encode() not in saved.read_bytes(), saved
