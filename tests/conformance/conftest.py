"""Backends under test for the conformance suite.

Each fixture param yields a :class:`Site`: a backend and a folder on it the test owns. A new
backend joins the suite by adding one factory to ``_FACTORIES`` (skipping, with a reason, when
the service it needs is not reachable); every contract test then runs against it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ferry.backends.base import Backend
from ferry.backends.local import LocalBackend
from ferry.backends.memory import MemoryBackend, reset_memory_stores
from ferry.core.address import Address


@dataclass
class Site:
    backend: Backend
    root: str  # an existing, empty folder the test may fill

    def path(self, *names: str) -> str:
        return self.backend.join(self.root, *names)


def _local(tmp_path: Path) -> Iterator[Site]:
    root = tmp_path / "root"
    root.mkdir()
    backend = LocalBackend()
    yield Site(backend, str(root))
    backend.close()


def _memory(tmp_path: Path) -> Iterator[Site]:
    # A store of its own per test: nothing leaks between tests, and the name shows in failures.
    name = f"conformance-{uuid.uuid4().hex[:12]}"
    backend = MemoryBackend(Address("memory", "/", host=name))
    backend.mkdir("/conformance")  # not the store root, so paths have a real parent folder
    yield Site(backend, "/conformance")
    backend.close()
    reset_memory_stores(name)


def _sftp(tmp_path: Path) -> Iterator[Site]:
    # A real OpenSSH sshd on loopback (tests/sshd.py), started once per run on first use.
    from sftp.conformance_site import sftp_site

    yield from sftp_site(tmp_path)


def _s3_moto(tmp_path: Path) -> Iterator[Site]:
    # moto's standalone server on loopback (tests/s3/servers.py), a fresh bucket per test.
    from s3.conformance_site import s3_site

    yield from s3_site("moto", tmp_path, Site)


def _s3_rclone(tmp_path: Path) -> Iterator[Site]:
    # ``rclone serve s3`` on loopback: a second, independent S3 implementation that checks SigV4.
    from s3.conformance_site import s3_site

    yield from s3_site("rclone", tmp_path, Site)


def _globus(tmp_path: Path) -> Iterator[Site]:
    # A GCSv5-style collection with HTTPS in the local fake of Globus (tests/globus/fake_globus.py).
    from globus.conformance_site import globus_site

    yield from globus_site(tmp_path, Site)


_FACTORIES: dict[str, Callable[[Path], Iterator[Site]]] = {
    "globus": _globus,
    "local": _local,
    "memory": _memory,
    "s3-moto": _s3_moto,
    "s3-rclone": _s3_rclone,
    "sftp": _sftp,
}


# Contract checks that assume POSIX folders, and why S3 differs (the S3 behaviour itself is
# tested in tests/s3). Keyed by test function; a parametrised case may be named after "[".
_S3_DIFFERS = {
    "test_list_gives_every_entry_with_kind_path_and_size": "S3 prefixes carry no modification time (None, not made up)",
    "test_path_through_a_file_is_not_a_directory": "S3 has no folders: key 'f/x' may exist beside object 'f'",
    "test_mkdir_without_parents_needs_the_parent": "S3 has no folders: a marker needs no parent marker",
    "test_missing_paths_raise_not_found[open_write_in_missing_folder]": "S3 has no folders to be missing",
    "test_resume_write_continues_at_offset": "S3 resumes whole uploaded parts (>= 5 MiB) through the queue; tests/s3",
    "test_resume_partial_is_a_hidden_tagged_name": "S3 keeps no partial object: parts live in the multipart upload",
    "test_readback_covers_a_resumed_file_from_its_start": "S3 resume is part-granular; tests/s3/test_resume.py",
}
_RCLONE_DIFFERS = {
    "test_empty_dirs_are_kept_and_listed": "rclone serve s3 keeps no empty folders (it stores no 'prefix/' markers)",
    "test_odd_names_round_trip": "the case makes an empty folder, which rclone serve s3 does not keep",
    "test_remove_file_and_empty_folder": "rclone serve s3 keeps no empty folders",
    "test_mkdir_parents": "rclone serve s3 keeps no empty folders",
    "test_mkdir_existing_without_exist_ok": "rclone serve s3 keeps no empty folders",
    "test_stat_agrees_with_list": "the case lists an empty folder, which rclone serve s3 does not keep",
    "test_open_read_of_a_folder_is_a_directory": "the case reads an empty folder, which rclone serve s3 does not keep",
}
_MOTO_DIFFERS = {
    "test_odd_names_round_trip[new\\\\nline]": "moto's server answers 404 to keys holding a newline",
}


def _s3_skip(request: pytest.FixtureRequest) -> None:
    if not request.param.startswith("s3-"):
        return
    node = request.node.name
    func = node.split("[", 1)[0]
    case = node.split("-", 2)[-1].rstrip("]") if "[" in node else ""
    table = {**_S3_DIFFERS, **(_RCLONE_DIFFERS if request.param == "s3-rclone" else _MOTO_DIFFERS)}
    reason = table.get(func) or table.get(f"{func}[{case}]")
    if reason:
        pytest.skip(reason)


@pytest.fixture(params=sorted(_FACTORIES))
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    _s3_skip(request)
    yield from _FACTORIES[request.param](tmp_path)
