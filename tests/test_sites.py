"""Saved sites: sites.toml round trips, validation, atomic writes and NAME:path resolution."""

from __future__ import annotations

import os
import stat
import threading
import tomllib
from pathlib import Path

import pytest

from ferry.core.address import parse_address
from ferry.core.errors import FerryError, UsageError
from ferry.credentials.sites import Site, SiteStore, resolve_address


@pytest.fixture(autouse=True)
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "config"
    monkeypatch.setenv("FERRY_CONFIG_DIR", str(path))
    return path


@pytest.fixture
def store(config_dir: Path) -> SiteStore:
    return SiteStore()


# -- round trips --


def test_empty_without_file(store: SiteStore, config_dir: Path) -> None:
    assert store.load() == {}
    assert store.list() == []
    assert store.get("hpc") is None
    assert not config_dir.exists()  # reading never creates anything


def test_add_list_get_remove(store: SiteStore, config_dir: Path) -> None:
    site = store.add(
        "hpc",
        "sftp://alice@login.example.org:2222/scratch/alice",
        {"identity_file": "~/.ssh/id_ed25519"},
        description="Cluster scratch",
    )
    assert site == Site(
        "hpc", "sftp://alice@login.example.org:2222/scratch/alice", "Cluster scratch", site.options
    )
    store.add("bucket", "s3://my-bucket/raw", {"region": "eu-west-1", "endpoint_url": "https://s3.example"})
    assert [s.name for s in SiteStore().list()] == ["bucket", "hpc"]  # a fresh store reads the file
    got = SiteStore().get("hpc")
    assert got is not None
    assert got.description == "Cluster scratch"
    assert dict(got.options) == {"identity_file": "~/.ssh/id_ed25519"}
    assert store.path == config_dir / "sites.toml"
    removed = store.remove("hpc")
    assert removed.name == "hpc"
    assert [s.name for s in store.list()] == ["bucket"]


def test_file_layout_and_permissions(store: SiteStore, config_dir: Path) -> None:
    store.add("hpc", "sftp://h/x", {"region": "r"}, description='say "hi"\nthere')
    text = (config_dir / "sites.toml").read_text()
    assert text.startswith("# Ferry's saved sites")
    doc = tomllib.loads(text)
    assert doc == {
        "version": 1,
        "sites": {
            "hpc": {"address": "sftp://h/x", "description": 'say "hi"\nthere', "options": {"region": "r"}}
        },
    }
    if os.name == "posix":
        assert stat.S_IMODE((config_dir / "sites.toml").stat().st_mode) == 0o600
        assert stat.S_IMODE(config_dir.stat().st_mode) == 0o700
    # Only the file and its lock remain: no temporary files left behind.
    assert sorted(p.name for p in config_dir.iterdir()) == ["sites.toml", "sites.toml.lock"]


def test_names_needing_quotes_round_trip(store: SiteStore) -> None:
    for name in ("my.site", "me@host", "a-b_c", "42"):
        store.add(name, "/data")
    assert sorted(SiteStore().load()) == sorted(["my.site", "me@host", "a-b_c", "42"])


def test_unicode_and_odd_values_round_trip(store: SiteStore) -> None:
    opts = {"prefix": "données/ü\\x", "quote": "'\"", "empty": ""}
    store.add("u1", "/data/ünïcode", opts, description="tab\there")
    site = SiteStore().get("u1")
    assert site is not None
    assert dict(site.options) == opts
    assert site.address == "/data/ünïcode"
    assert site.description == "tab\there"


# -- validation --


def test_duplicate_needs_replace(store: SiteStore) -> None:
    store.add("hpc", "/one")
    with pytest.raises(UsageError, match=r"already exists.*--replace"):
        store.add("hpc", "/two")
    store.add("hpc", "/two", replace=True)
    site = store.get("hpc")
    assert site is not None and site.address == "/two"


def test_remove_unknown_lists_known(store: SiteStore) -> None:
    with pytest.raises(UsageError, match="none saved yet"):
        store.remove("nope")
    store.add("beta", "/b")
    store.add("alpha", "/a")
    with pytest.raises(UsageError, match=r"No site named 'nope' \(known sites: alpha, beta\)"):
        store.remove("nope")


VALID = ["hpc", "ab", "a1", "1a", "my.site", "me@host", "x_y-z", "A" * 64]
INVALID = ["", "a", "-ab", ".ab", "_ab", "@ab", "a b", "a:b", "a/b", "ab\n", "ab\\", "A" * 65, "é1", "ab#"]


@pytest.mark.parametrize("name", VALID)
def test_valid_names_work_as_name_colon_path(store: SiteStore, name: str, tmp_path: Path) -> None:
    store.add(name, str(tmp_path))
    address = parse_address(f"{name}:sub/file", sites=store.resolver())
    assert (address.scheme, address.path, address.site) == ("local", str(tmp_path / "sub" / "file"), name)


@pytest.mark.parametrize("name", INVALID)
def test_invalid_names(store: SiteStore, name: str) -> None:
    with pytest.raises(UsageError, match="Invalid site name"):
        store.add(name, "/data")


@pytest.mark.parametrize(
    "address",
    [
        "hpc:foo",  # another site (or alias): sites are never defined in terms of each other
        "sftp://",
        "sftp:///path",
        "s3://Bad_Bucket!/x",
        "globus://",
        "ftp://host/x",
        "",
        "/x\x00y",
    ],
)
def test_bad_addresses(store: SiteStore, address: str) -> None:
    with pytest.raises(UsageError):
        store.add("site", address)
    assert store.load() == {}


def test_local_addresses_are_made_absolute(
    store: SiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert store.add("rel", "./data/run1").address == str(tmp_path / "data" / "run1")
    assert store.add("home", "~/results").address == str(tmp_path / "home" / "results")
    assert store.add("url", "file:///srv/x").address == "/srv/x"
    assert store.add("colon", "./a:b").address == str(tmp_path / "a:b")
    # URLs are kept as typed.
    assert store.add("bkt", "s3://bucket/pre/fix/").address == "s3://bucket/pre/fix/"


@pytest.mark.parametrize(
    "key", ["password", "Password", "aws_secret_access_key", "session_token", "ssh_passphrase"]
)
def test_secret_like_options_refused(store: SiteStore, key: str) -> None:
    with pytest.raises(UsageError, match="looks like a secret"):
        store.add("hpc", "/x", {key: "hunter2"})
    assert not store.path.exists()


@pytest.mark.parametrize("key", ["", "1abc", "a b", "a=b", "a.b"])
def test_malformed_option_names(store: SiteStore, key: str) -> None:
    with pytest.raises(UsageError, match="Invalid option name"):
        store.add("hpc", "/x", {key: "v"})


# -- resolving --


def test_resolver_for_each_scheme(store: SiteStore, tmp_path: Path) -> None:
    store.add("loc", str(tmp_path))
    store.add("ssh", "sftp://alice@host:2222/scratch/alice")
    store.add("home", "sftp://host")
    store.add("bkt", "s3://bucket/pre")
    store.add("glb", "globus://0c1d-collection/~/data")
    store.add("mem", "memory://t/base")
    parse = store.resolver()

    a = parse_address("loc:x/y", parse)
    assert (a.scheme, a.path, a.site) == ("local", str(tmp_path / "x" / "y"), "loc")
    a = parse_address("ssh:results/r1", parse)
    assert (a.scheme, a.host, a.user, a.port, a.path, a.site) == (
        "sftp",
        "host",
        "alice",
        2222,
        "/scratch/alice/results/r1",
        "ssh",
    )
    assert parse_address("ssh:/etc/x", parse).path == "/etc/x"
    assert parse_address("home:", parse).path == ""  # the login folder
    a = parse_address("bkt:raw/", parse)
    assert (a.scheme, a.host, a.path, a.trailing_slash) == ("s3", "bucket", "pre/raw", True)
    assert parse_address("glb:sub", parse).path == "/~/data/sub"
    a = parse_address("mem:f", parse)
    assert (a.scheme, a.host, a.path) == ("memory", "t", "/base/f")
    assert str(a) == "mem:/base/f"


def test_resolver_base_and_unknown(store: SiteStore) -> None:
    store.add("ssh", "sftp://host/data")
    resolve = store.resolver()
    base = resolve("ssh")
    assert base is not None and base.site == "ssh" and base.path == "/data"
    assert resolve("nope") is None
    with pytest.raises(UsageError, match="Unknown site 'nope'"):
        parse_address("nope:x", resolve)


def test_resolve_address_uses_the_default_store(config_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="Unknown site"):
        resolve_address("hpc:x")
    SiteStore().add("hpc", str(tmp_path / "base"))
    # Not cached across calls: a site added meanwhile is seen.
    assert resolve_address("hpc:x").path == str(tmp_path / "base" / "x")
    assert resolve_address("s3://b/k").host == "b"
    assert resolve_address(str(tmp_path)).path == str(tmp_path)


def test_resolver_reads_the_file_once(store: SiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store.add("aa", "/a")
    store.add("bb", "/b")
    calls = 0
    real = SiteStore.load

    def counting(self: SiteStore) -> dict[str, Site]:
        nonlocal calls
        calls += 1
        return real(self)

    monkeypatch.setattr(SiteStore, "load", counting)
    resolve = store.resolver()
    assert resolve("aa") and resolve("bb") and resolve("cc") is None
    assert calls == 1


# -- malformed files --


@pytest.mark.parametrize(
    ("content", "line", "words"),
    [
        ('version = 1\n\n[sites.hpc]\naddress = "sftp://h/x\n', 4, "malformed TOML"),
        ("version = 1\n[sites.hpc\n", 2, "malformed TOML"),
        ('version = 1\n\n[sites.ok]\naddress = "/a"\n\n[sites.hpc]\ndescription = "x"\n', 6, "no address"),
        ('[sites."bad name"]\naddress = "/a"\n', 1, "invalid site name"),
        ('[sites.hpc]\naddress = "/a"\n[sites.hpc.options]\nport = 22\n', 1, "must be text"),
        ('[sites.hpc]\naddress = "/a"\npassword = "hunter2"\n', 1, "unknown setting"),
        ('\n[sites.hpc]\naddress = "other:/a"\n', 2, "cannot be another site"),
        ('\n\n[sites.hpc]\naddress = "/a"\n[sites.hpc.options]\ntoken = "x"\n', 3, "looks like a secret"),
        ("\n\n# c\n[sites.hpc]\naddress = 5\n", 4, "no address"),
    ],
)
def test_malformed_file_names_file_and_line(
    store: SiteStore, config_dir: Path, content: str, line: int, words: str
) -> None:
    config_dir.mkdir()
    (config_dir / "sites.toml").write_text(content)
    with pytest.raises(UsageError) as info:
        store.load()
    msg = info.value.message
    assert msg.startswith(f"{config_dir / 'sites.toml'}, line {line}: "), msg
    assert words in msg
    assert "hunter2" not in msg
    assert "\n" not in msg


@pytest.mark.parametrize(
    ("content", "words"),
    [("version = 2\n", "unsupported version"), ('sites = "x"\n', "must be a table")],
)
def test_malformed_file_without_line(store: SiteStore, config_dir: Path, content: str, words: str) -> None:
    config_dir.mkdir()
    (config_dir / "sites.toml").write_text(content)
    with pytest.raises(UsageError, match=words) as info:
        store.load()
    assert str(config_dir / "sites.toml") in info.value.message


def test_not_utf8(store: SiteStore, config_dir: Path) -> None:
    config_dir.mkdir()
    (config_dir / "sites.toml").write_bytes(b'# ok\n[sites.hpc]\naddress = "/\xff"\n')
    with pytest.raises(UsageError, match=r"sites\.toml, line 3: not valid UTF-8"):
        store.load()


def test_broken_file_only_matters_when_a_site_is_named(config_dir: Path, tmp_path: Path) -> None:
    config_dir.mkdir()
    (config_dir / "sites.toml").write_text("[[[")
    assert resolve_address(str(tmp_path)).path == str(tmp_path)
    assert resolve_address("s3://b/k").scheme == "s3"
    with pytest.raises(UsageError, match="line 1"):
        resolve_address("hpc:x")


def test_hand_written_forms_are_accepted(store: SiteStore, config_dir: Path) -> None:
    config_dir.mkdir()
    (config_dir / "sites.toml").write_text(
        '# no version key, inline tables, dotted keys\nsites.a1 = { address = "/a" }\n'
        '[sites."b.2"]\naddress = "s3://b"\noptions = { region = "x" }\n'
    )
    loaded = store.load()
    assert loaded["a1"].address == "/a"
    assert dict(loaded["b.2"].options) == {"region": "x"}
    store.add("c3", "/c")  # rewriting keeps them
    assert sorted(SiteStore().load()) == ["a1", "b.2", "c3"]


# -- atomicity and concurrency --


def test_failed_write_keeps_the_old_file(
    store: SiteStore, config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.add("hpc", "/one")
    before = (config_dir / "sites.toml").read_bytes()

    def broken_replace(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("ferry.credentials.sites.os.replace", broken_replace)
    with pytest.raises(FerryError, match="No space"):
        store.add("other", "/two")
    monkeypatch.undo()
    assert (config_dir / "sites.toml").read_bytes() == before
    assert sorted(p.name for p in config_dir.iterdir()) == ["sites.toml", "sites.toml.lock"]


def test_concurrent_adds_lose_nothing(store: SiteStore) -> None:
    errors: list[BaseException] = []

    def add(i: int) -> None:
        try:
            SiteStore().add(f"site{i:02d}", f"/data/{i}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(store.load()) == 24


def test_explicit_path(tmp_path: Path) -> None:
    other = SiteStore(tmp_path / "elsewhere" / "s.toml")
    other.add("hpc", "/x")
    assert (tmp_path / "elsewhere" / "s.toml").exists()
    assert SiteStore().load() == {}
