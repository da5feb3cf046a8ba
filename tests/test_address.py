"""parse_address: every form in its docstring, and every way of getting one wrong."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import ferry.core.address as address_mod
from ferry.core.address import Address, parse_address, register_alias_resolver
from ferry.core.errors import FerryError, UsageError


@pytest.fixture(autouse=True)
def no_alias_resolvers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Backends may register resolvers process-wide (ssh_config aliases); tests see none but their own.
    monkeypatch.setattr(address_mod, "_extra_resolvers", [])
    yield


# -- local paths --


def test_absolute_local_path() -> None:
    a = parse_address("/data/run42")
    assert a == Address("local", "/data/run42")
    assert a.is_local and a.endpoint == "local" and a.name == "run42"
    assert str(a) == "/data/run42"


def test_local_path_is_normalised_and_keeps_a_trailing_slash() -> None:
    a = parse_address("/data/./x/../run42/")
    assert (a.path, a.trailing_slash) == ("/data/run42", True)
    assert str(a) == "/data/run42/"
    assert parse_address("/").trailing_slash is False  # the root is not "a folder's contents"


def test_home_is_expanded(monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert parse_address("~/data") == Address("local", os.path.join(str(tmp_path), "data"))
    assert parse_address("~") == Address("local", str(tmp_path))


def test_relative_paths_are_made_absolute(
    monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse_address("sub/file").path == os.path.join(str(tmp_path), "sub", "file")


@pytest.mark.parametrize("text", ["./a:b", "./notes:2024.txt", "/x/y:z", "./weird://name"])
def test_slash_before_colon_means_a_local_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str], text: str
) -> None:
    monkeypatch.chdir(tmp_path)
    a = parse_address(text)
    assert a.scheme == "local"
    assert a.path == os.path.abspath(text)  # the colon is part of the name, not a site or a scheme


def test_one_letter_prefix_is_a_drive_not_a_site(monkeypatch: pytest.MonkeyPatch) -> None:
    # "C:\\data" on Windows; on POSIX a strange relative name. Never "site C".
    called: list[str] = []

    def resolver(name: str) -> Address | None:
        called.append(name)
        return Address("sftp", "/", host="h")

    assert parse_address("C:data", sites=resolver).scheme == "local"
    assert called == []


# -- file:// --


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("file:///x", "/x"),
        ("file://localhost/srv/data", "/srv/data"),
        ("file:///with%20space", "/with space"),  # file URLs are real URLs: percent-decoded
        ("file://", "/"),
        ("FILE:///upper", "/upper"),
        ("file:///what?.txt", "/what?.txt"),  # "?" and "#" are file-name characters, not a query
        ("file:///a#1", "/a#1"),
    ],
)
def test_file_urls(text: str, path: str) -> None:
    assert parse_address(text) == Address("local", path)


def test_file_url_on_another_host_is_refused() -> None:
    with pytest.raises(UsageError, match="this computer"):
        parse_address("file://server/share")


# -- sftp --


@pytest.mark.parametrize(
    ("text", "user", "host", "port", "path"),
    [
        ("sftp://host/data", None, "host", None, "/data"),
        ("sftp://me@host/data", "me", "host", None, "/data"),
        ("sftp://me@host:2222/data", "me", "host", 2222, "/data"),
        ("sftp://host:22", None, "host", 22, ""),  # "" is the login folder
        ("sftp://host", None, "host", None, ""),
        ("sftp://[::1]/data", None, "::1", None, "/data"),
        ("sftp://me@[2001:db8::7]:65535/x", "me", "2001:db8::7", 65535, "/x"),
        ("sftp://first.last@example.org@host/x", "first.last@example.org", "host", None, "/x"),
        ("SFTP://Host.Example/p", None, "Host.Example", None, "/p"),
        ("sftp://host/100%25 literal", None, "host", None, "/100%25 literal"),  # not decoded
    ],
)
def test_sftp_forms(text: str, user: str | None, host: str, port: int | None, path: str) -> None:
    a = parse_address(text)
    assert (a.scheme, a.user, a.host, a.port, a.path) == ("sftp", user, host, port, path)


def test_sftp_endpoint_and_str() -> None:
    a = parse_address("sftp://me@host:2222/data/")
    assert a.endpoint == "sftp://me@host:2222"
    assert a.trailing_slash
    assert a.path == "/data/"  # remote paths are taken literally, not normalised
    assert str(a) == "sftp://me@host:2222/data/"
    assert parse_address(str(a)) == a
    assert str(parse_address("sftp://host")) == "sftp://host"


def test_ipv6_address_str_round_trips() -> None:
    a = parse_address("sftp://[::1]/x")
    assert parse_address(str(a)) == a


def test_unbracketed_ipv6_is_refused() -> None:
    with pytest.raises(UsageError):
        parse_address("sftp://fe80::1/x")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("sftp://host:abc/x", "Malformed port"),
        ("sftp://host:0/x", "Malformed port"),
        ("sftp://host:65536/x", "Malformed port"),
        ("sftp://host:-1/x", "Malformed port"),
        ("sftp://host:/x", "Malformed port"),
        ("sftp://[::1]:99999/x", "Malformed port"),
        ("sftp://[::1/x", "Malformed IPv6"),
        ("sftp://[::1]junk/x", "Malformed address"),
        ("sftp:///x", "Missing host"),
        ("sftp://me@/x", "Missing host"),
        ("sftp://@host/x", "Empty user"),
        ("sftp://ho st/x", "Malformed host"),
        ("sftp://ho\tst/x", "control character"),
    ],
)
def test_malformed_sftp(text: str, reason: str) -> None:
    with pytest.raises(UsageError, match=reason):
        parse_address(text)


# -- s3 --


@pytest.mark.parametrize(
    ("text", "bucket", "key", "trailing"),
    [
        ("s3://bucket/key/x.nc", "bucket", "key/x.nc", False),
        ("s3://bucket/prefix/", "bucket", "prefix/", True),
        ("s3://bucket", "bucket", "", True),  # the bucket itself: its contents
        ("s3://bucket/", "bucket", "", True),
        ("s3://", "", "", False),  # all buckets
        ("s3://my.bucket-1/a%20b", "my.bucket-1", "a%20b", False),  # keys are literal
    ],
)
def test_s3_forms(text: str, bucket: str, key: str, trailing: bool) -> None:
    a = parse_address(text)
    assert (a.scheme, a.host, a.path, a.trailing_slash) == ("s3", bucket, key, trailing)
    assert a.user is None and a.port is None


def test_s3_str_round_trips() -> None:
    assert str(parse_address("s3://bucket/key/x")) == "s3://bucket/key/x"
    assert str(parse_address("s3://")) == "s3://"
    assert parse_address("s3://bucket/key/x").endpoint == "s3://bucket"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("s3://bad_bucket!/x", "Malformed bucket"),
        ("s3://-leading/x", "Malformed bucket"),
        ("s3://user@bucket/x", "user name"),
    ],
)
def test_malformed_s3(text: str, reason: str) -> None:
    with pytest.raises(UsageError, match=reason):
        parse_address(text)


# -- globus and memory --


def test_globus() -> None:
    a = parse_address("globus://3f1a-collection/~/data/")
    assert (a.scheme, a.host, a.path, a.trailing_slash) == ("globus", "3f1a-collection", "/~/data/", True)
    assert parse_address("globus://c").path == "/"
    with pytest.raises(UsageError, match="Missing collection"):
        parse_address("globus:///data")
    with pytest.raises(UsageError, match="user name"):
        parse_address("globus://me@c/data")


def test_memory() -> None:
    a = parse_address("memory://store/a/b")
    assert a == Address("memory", "/a/b", host="store")
    assert a.endpoint == "memory://store"
    assert (a.name, a.parent().path) == ("b", "/a")
    assert str(a.join("c")) == "memory://store/a/b/c"
    assert parse_address("memory://store") == Address("memory", "/", host="store")
    with pytest.raises(UsageError, match="Missing store name"):
        parse_address("memory:///x")


# -- saved sites --


SITES = {
    "cluster": Address("sftp", "/home/me", host="login.hpc", user="me"),
    "home-login": Address("sftp", "", host="h"),  # no base path: the login folder
    "lab": Address("local", "/mnt/lab"),
    "archive": Address("s3", "projects", host="bucket"),
}


def resolver(name: str) -> Address | None:
    return SITES.get(name)


@pytest.mark.parametrize(
    ("text", "scheme", "path", "trailing"),
    [
        ("cluster:data/run1", "sftp", "/home/me/data/run1", False),
        ("cluster:/scratch/x", "sftp", "/scratch/x", False),
        ("cluster:", "sftp", "/home/me", False),
        ("cluster:data/", "sftp", "/home/me/data", True),
        ("cluster:a/../b", "sftp", "/home/me/b", False),
        ("home-login:x", "sftp", "x", False),
        ("home-login:", "sftp", "", False),
        ("lab:raw/1", "local", "/mnt/lab/raw/1", False),
        ("lab:/elsewhere", "local", "/elsewhere", False),
        ("archive:2024/x", "s3", "projects/2024/x", False),
    ],
)
def test_site_forms(text: str, scheme: str, path: str, trailing: bool) -> None:
    a = parse_address(text, sites=resolver)
    assert (a.scheme, a.path, a.trailing_slash, a.site) == (scheme, path, trailing, text.split(":")[0])
    base = SITES[text.split(":")[0]]
    assert (a.host, a.user) == (base.host, base.user)


def test_site_str_uses_the_site_name() -> None:
    assert str(parse_address("cluster:data", sites=resolver)) == "cluster:/home/me/data"


def test_site_with_home_relative_local_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/someone")
    assert parse_address("lab:~/x", sites=resolver).path == "/home/someone/x"


def test_unknown_site() -> None:
    with pytest.raises(UsageError, match="Unknown site 'nosuch'") as info:
        parse_address("nosuch:data", sites=resolver)
    assert "./nosuch:data" in info.value.message  # tells how to mean a local file instead
    with pytest.raises(UsageError, match="Unknown site"):
        parse_address("nosuch:data")  # no resolver at all


def test_registered_alias_resolver_is_consulted_after_sites() -> None:
    register_alias_resolver(lambda name: Address("sftp", "", host=f"{name}.alias") if name == "box" else None)
    assert parse_address("box:x").host == "box.alias"
    assert parse_address("cluster:x", sites=resolver).host == "login.hpc"
    with pytest.raises(UsageError):
        parse_address("other:x")


# -- everything else that is wrong --


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "Empty address"),
        ("/data/\x00x", "NUL"),
        ("ftp://host/x", "Unsupported address scheme 'ftp://'"),
        ("https://example.org/x", "Unsupported address scheme"),
        ("gs://bucket/x", "Unsupported address scheme"),
    ],
)
def test_errors_are_usage_errors(text: str, reason: str) -> None:
    with pytest.raises(UsageError, match=reason) as info:
        parse_address(text)
    assert isinstance(info.value, FerryError) and isinstance(info.value, ValueError)
    assert info.value.kind == "usage"


def test_unsupported_scheme_lists_the_known_ones() -> None:
    with pytest.raises(UsageError) as info:
        parse_address("ftp://host/x")
    for scheme in ("file://", "sftp://", "s3://", "globus://", "memory://"):
        assert scheme in info.value.message


# -- Address helpers --


def test_remote_join_parent_name() -> None:
    a = Address("sftp", "", host="h")
    assert a.join("x", "y").path == "x/y"  # relative to the login folder stays relative
    b = Address("sftp", "/a/b/", host="h", trailing_slash=True)
    assert (b.name, b.parent().path) == ("b", "/a")
    assert b.join("c") == Address("sftp", "/a/b/c", host="h")
    assert Address("sftp", "/", host="h").parent().path == "/"


def test_local_join_parent_name() -> None:
    a = Address("local", "/a/b")
    assert a.join("c").path == os.path.join("/a/b", "c")
    assert (a.name, a.parent().path) == ("b", "/a")
    assert Address("local", "/").parent().path == "/"
