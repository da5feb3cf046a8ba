"""Many small files as one tar stream over an exec channel (``tar c | ssh host tar x``).

Over SFTP a small file costs round trips, not bytes (OPEN; WRITE+READ-back+CLOSE;
SETSTAT+RENAME), so ~500 files/s was the ceiling with four workers. Where the host runs a POSIX
``sh`` with a ``tar`` (probed once per connection), the engine's batching seam
(``ferry.transfers.batch``) hands over up to a few hundred small files at once and this module
moves them with one exec each way:

* **up**: one ``cd -- BASE && tar -x -o -f - && TOOL -- ./p1 ./p2 ...``. The stream's members are
  the files' *partial* names (``temp_name(name, task id)``, exactly what the per-file writer uses,
  so a crash leaves only what crash recovery already knows how to clean up); the remote hash of
  each extracted partial comes back in the same exec and is compared with the stream hash by the
  caller before anything is renamed. Then :func:`commit_batch` renames them all in one pipelined
  flight of SFTP RENAMEs (which never replace a file unless the policy said overwrite).
* **down**: one ``cd -- BASE && exec tar -c -f - --no-recursion ./r1 ./r2 ...``, parsed as a
  stream. A member is matched to a request by the *requested* name, never trusted otherwise;
  anything odd (a name not asked for, a non-regular member, a truncated stream, a name the
  remote tar complained about) makes that file go the per-file way.

Names that cannot be put on a shell command line beyond doubt (not UTF-8, control characters,
backslashes, ``..``) are refused here with :class:`Unsupported`, and the caller moves them per
file. Nothing here decides a conflict policy: a file that is in the way fails its RENAME and
the caller runs the normal per-file copy for it.
"""

from __future__ import annotations

import logging
import os
import posixpath
import shlex
import stat as stat_mod
import tarfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ferry.backends.base import BatchData, Entry, Kind, temp_name
from ferry.backends.sftp import limits
from ferry.backends.sftp import paramiko_adapter as adapter
from ferry.backends.sftp.errors import map_error
from ferry.backends.sftp.host import Host, OnHost
from ferry.backends.sftp.names import KnownNames
from ferry.backends.sftp.protocol import wire
from ferry.backends.sftp.remote_hash import parse_digests
from ferry.core.errors import AlreadyExists, FerryError, NotFound, Transient, Unsupported

log = logging.getLogger("ferry.sftp")

ENV = "FERRY_SFTP_TAR"  # "0" turns tar batches off (everything goes per file over SFTP)
MAX_COMMAND = 64 << 10  # bytes of command line per exec: far below ARG_MAX everywhere
MEMBER_MODE = 0o644  # as a new SFTP file gets under the usual umask; never world-writable as root

# Does an exec channel run a POSIX sh whose tar can write and read an archive? (busybox, GNU and
# bsd tar all know -c/-t/-x/-f/-o and --no-recursion.) An sftp-only account (ForceCommand
# internal-sftp) prints nothing; a refused exec raises: both mean "no".
# The trailing cat waits for Ferry's EOF (see write_batch for why a command must not end first).
_PROBE = (
    "cd -- . && tar -c -f - --no-recursion . 2>/dev/null | tar -t -f - >/dev/null 2>&1 && echo ferry-tar-ok; "
    "cat >/dev/null"
)


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.usable: bool | None = None
        self.probe_failures = 0  # probes that met a connection or channel problem, not an answer
        self.uploads = 0  # files moved through tar batches (tests and benchmarks read these)
        self.downloads = 0


_states: weakref.WeakKeyDictionary[Any, _State] = weakref.WeakKeyDictionary()
_states_lock = threading.Lock()


def state(host: Host) -> _State:
    with _states_lock:
        s = _states.get(host)
        if s is None:
            s = _states[host] = _State()
        return s


def usable(host: Host) -> bool:
    """Whether this host takes tar batches: probed once per host (one exec), then cached."""
    if os.environ.get(ENV, "1") == "0":
        return False
    s = state(host)
    if s.usable is None:
        with s.lock:
            if s.usable is None:
                try:
                    _rc, out, _err = host.shell.run(_PROBE, timeout=30, stdin=b"")
                    s.usable = b"ferry-tar-ok" in out
                except Transient as exc:
                    # A channel refused under a tight MaxSessions (sshd still counts sessions
                    # being closed) or a connection that dropped says nothing about tar: this
                    # batch goes per file and a later one asks again (other trouble settles it
                    # as "no" the third time). Cached at once, it turned tar off for the whole
                    # run (the MaxSessions 2 test failed 4 runs in 6).
                    if not _refusal(exc):
                        s.probe_failures += 1
                    if s.probe_failures >= 3:
                        s.usable = False
                    log.info("%s: tar probe failed (%s: %s); these go per file", host.target.hostname, exc, exc.detail)
                    return False
                except Exception as exc:  # exec refused, no shell: per-file SFTP, as before
                    log.info("%s: no tar over exec (%s); small files go per file", host.target.hostname, exc)
                    s.usable = False
    return bool(s.usable)


def _refusal(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) is the server refusing one more channel."""
    while exc is not None:
        if type(exc).__name__ == "ChannelException" or str(exc) == "Unable to open channel.":
            return True
        exc = exc.__cause__
    return False


def safe_name(path: str) -> bool:
    """A path this module may put on a shell command line and in a tar header without doubt."""
    try:
        path.encode("utf-8")  # surrogate escapes (names that are not UTF-8) fail here
    except UnicodeEncodeError:
        return False
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F or ch == "\\" for ch in path):
        return False
    return ".." not in path.split("/")


def _base_of(folders: Sequence[str]) -> str | None:
    """The deepest folder holding all of ``folders`` (all absolute, or all relative to the login
    folder); None when they mix."""
    try:
        base = posixpath.commonpath(list(folders))
    except ValueError:
        return None
    return base or "."


# ---- up ----


def _ustar_header(name: bytes, size: int, mtime: int) -> bytes:
    """A plain ustar header for a regular file (what ``TarInfo.tobuf`` makes for a short name,
    at a tenth of its cost: it was 6% of the client's CPU for 10,000 small files)."""
    head = (
        name.ljust(100, b"\0")
        + b"%07o\0" % MEMBER_MODE
        + b"0000000\0" * 2  # uid, gid
        + b"%011o\0" % size
        + b"%011o\0" % mtime
        + b" " * 8  # the checksum, counted as spaces
        + b"0"  # a regular file
        + b"\0" * 100  # link name
        + b"ustar\x0000"
        + b"\0" * (32 + 32 + 8 + 8 + 155 + 12)
    )
    checksum = b"%06o\0 " % sum(head)
    return head[:148] + checksum + head[156:]


_PADS = [b"\0" * n for n in range(tarfile.BLOCKSIZE)]


def _member(name: str, data: bytes, mtime: int) -> tuple[bytes, bytes, bytes]:
    """A member's header, data and padding, kept apart: the stream is sent as these pieces, not
    joined (joining 16 MiB batches of 1 MiB files was two copies of every byte into fresh,
    page-faulting buffers: write_batch's join was 4% of the samples of 1,000 x 1 MiB up)."""
    raw = ("./" + name).encode("utf-8")
    pad = _PADS[-len(data) % tarfile.BLOCKSIZE]
    if len(raw) < 100 and len(data) < 8 << 30 and 0 <= mtime < 8**11:
        return _ustar_header(raw, len(data), mtime), data, pad
    info = tarfile.TarInfo("./" + name)
    info.size = len(data)
    info.mtime = mtime
    info.mode = MEMBER_MODE
    info.type = tarfile.REGTYPE
    return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="strict"), data, pad


@dataclass
class _Upload:
    """One tar batch up: its members in order and what the command line names."""

    base: str  # the folder the command works in
    todo: list[tuple[int, str]]  # (index, partial path) of each member, in order
    plan: list[tuple[int, str, int]]  # (index, member name relative to base, mtime) of each member
    args: list[str]  # the members' names, quoted, as the hash tool gets them
    groups: dict[str, list[str]]  # folder (relative to base) -> its members, quoted, as mv gets them


def write_batch(
    backend: OnHost, items: Sequence[tuple[str, bytes | BatchData, str, datetime | None]], algo: str | None
) -> list[str | BaseException]:
    """Write each ``(final path, data, token, mtime)`` to its partial name with one ``tar -x``
    and return per item the ``algo`` digest of the extracted partial file as the server reads
    it (with ``algo`` None: ``size:N``, its size as ``wc -c`` counts it), or the exception that
    item met (Unsupported: move it per file). ``data`` that is not bytes is read only when its
    member is sent (:class:`~ferry.backends.base.BatchData`)."""
    host = backend._host
    tool = host.hash_tools.get(algo) if algo is not None else "wc -c"
    results: list[str | BaseException] = [Unsupported("not sent in a tar batch")] * len(items)
    if tool is None:
        return [Unsupported(f"{host.target.hostname} cannot compute {algo} checksums")] * len(items)
    todo = _partials(items)
    base = _base_of([posixpath.dirname(p) for _i, p in todo]) if todo else None
    if base is None:
        return results
    up = _plan_upload(host.names, items, todo, base)
    size = sum(len(items[i][1]) for i, _r, _m in up.plan)
    command = _extract_command(up, tool).encode("utf-8")
    try:
        rc, out, err = host.shell.run(command, timeout=max(60.0, size / (1 << 20)), stdin=_archive(items, up.plan))
    except BaseException as exc:
        for i, _p in up.todo:
            results[i] = exc
        return results
    digests = _upload_digests(out, algo, up) if rc == 0 else None
    if digests is None:
        problem = Transient(
            f"tar batch on {host.target.hostname} failed (exit {rc})", detail=err.decode(errors="replace")[-500:]
        )
        log.info("%s; its files go per file: %s", problem.message, problem.detail)
        for i, _p in up.todo:
            results[i] = problem
        return results
    state(host).uploads += len(up.todo)
    for (i, _p), digest in zip(up.todo, digests, strict=True):
        results[i] = digest
    return results


def _partials(items: Sequence[tuple[str, bytes | BatchData, str, datetime | None]]) -> list[tuple[int, str]]:
    """(index, partial path) of the items whose partial names are safe on a command line."""
    todo: list[tuple[int, str]] = []
    for i, (final, _data, token, _mtime) in enumerate(items):
        folder, name = posixpath.split(final)
        partial = posixpath.join(folder, temp_name(name, token))
        if safe_name(partial):
            todo.append((i, partial))
    return todo


def _plan_upload(
    names: KnownNames,
    items: Sequence[tuple[str, bytes | BatchData, str, datetime | None]],
    todo: list[tuple[int, str]],
    base: str,
) -> _Upload:
    """The members, as many as one command line holds (the rest go per file; the scheduler
    keeps batches below this)."""
    now = int(time.time())
    up = _Upload(base, todo, [], [], {})
    length = 0
    for i, partial in todo:
        rel = posixpath.relpath(partial, base)
        arg = shlex.quote("./" + rel)
        length += 2 * (len(arg) + 8)  # each name is on the command line twice (hash, mv)
        if length > MAX_COMMAND:
            up.todo = todo[: len(up.args)]
            break
        mtime = items[i][3]
        names.touch(partial)  # a later stat of it (cancel's clean-up) must ask the server
        up.plan.append((i, rel, int(mtime.timestamp()) if mtime is not None else now))
        up.args.append(arg)
        up.groups.setdefault(posixpath.dirname(rel), []).append('"$d"/' + arg)
    return up


def _archive(
    items: Sequence[tuple[str, bytes | BatchData, str, datetime | None]], plan: list[tuple[int, str, int]]
) -> Iterator[tuple[bytes, ...]]:
    """The archive, a member at a time: each file is read as its turn comes and let go once
    sent."""
    for i, rel, mtime in plan:
        data = items[i][1]
        yield _member(rel, data if isinstance(data, bytes | bytearray) else data.read(), mtime)
    yield (b"\0" * (2 * tarfile.BLOCKSIZE),)


def _extract_command(up: _Upload, tool: str) -> str:
    """The command that extracts the archive on its stdin and prints the members' digests.

    The folder may not exist yet: its own task (the planner emits folders first) may still be
    waiting for another worker. Made here as the per-file copy makes a missing parent.
    The archive is extracted into a fresh staging folder beside the files, and only when every
    member arrived, was extracted and hashed are they moved (renamed) to their partial names:
    if the connection drops mid-stream, sshd does not stop the command, and a `tar -x` straight
    into the partial names would go on extracting the members that did arrive, into names the
    retry of those files (per file, on a new connection) may already have renamed into place:
    stray partial files (seen with the connection-cut test under load). A stream cut anywhere
    fails tar (mid-member) or the hash tool (a member missing), and the staging folder goes.
    This replaced taking the archive whole into a temporary file first, which wrote and read
    every byte once more on the server: 1 GiB of 16 MiB batches, extract alone 0.97 s, through
    a temporary file 2.16 s (mostly kernel time).

    The trailing ``cat`` keeps the command alive until our EOF has arrived: paramiko sends a
    channel's EOF outside its lock, so an EOF racing the server's CLOSE of a command that had
    already ended can arrive after the channel is gone, and sshd then drops the whole
    connection ("ieof packet referred to nonexistent channel", seen here with fast batches).
    The digests are printed last, after the clean-up: a connection gone by then kills the
    shell at its first write (SIGPIPE), and nothing must be left behind when that happens.
    """
    where = shlex.quote(up.base)
    moves = " && ".join(
        f"mkdir -p -- {shlex.quote('./' + folder)} && mv -f -- {' '.join(srcs)} {shlex.quote('./' + folder + '/')}"
        if folder
        else f"mv -f -- {' '.join(srcs)} ./"
        for folder, srcs in up.groups.items()
    )
    return (
        f"{{ cd -- {where} 2>/dev/null || {{ mkdir -p -- {where} && cd -- {where}; }}; }} && "
        f"d=$(mktemp -d ./.ferry-batch.XXXXXX) || {{ cat >/dev/null; exit 1; }}; "
        f'tar -x -o -f - -C "$d" && r=$(cd "$d" && {tool} -- {" ".join(up.args)}) && {moves}; s=$?; '
        f'rm -rf -- "$d"; cat >/dev/null; [ $s -eq 0 ] && printf \'%s\\n\' "$r"; exit $s'
    )


def _upload_digests(out: bytes, algo: str | None, up: _Upload) -> list[str] | None:
    """One answer per member from what the command printed, or None if it does not fit."""
    if algo is None:
        return _parse_sizes(out, ["./" + posixpath.relpath(p, up.base) for _i, p in up.todo])
    return parse_digests(out, len(up.todo))


def _parse_sizes(out: bytes, names: list[str]) -> list[str] | None:
    """``wc -c -- f1 f2 ...``: one ``COUNT NAME`` line per file in argument order (then a total
    line); each line must name the file it stands for. None if anything differs."""
    lines = out.decode("utf-8", "replace").splitlines()
    if len(lines) < len(names):
        return None
    sizes = []
    for line, name in zip(lines, names, strict=False):
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or not parts[0].isdigit() or parts[1] != name:
            return None
        sizes.append(f"size:{parts[0]}")
    return sizes


def commit_batch(backend: OnHost, items: Sequence[tuple[str, str, bool, int]]) -> list[BaseException | None]:
    """Rename each ``(partial, final, overwrite, size)`` into place, all RENAMEs in one flight on
    one SFTP channel (the server answers in order). Without ``overwrite`` SFTP's RENAME never
    replaces a file, so a name taken meanwhile fails that item with AlreadyExists. If the
    connection drops, an item counts as committed only if its partial is gone and its final name
    holds a regular file of its size (as the small-file writer decides, see there)."""
    host = backend._host
    names = host.names
    results: list[BaseException | None] = [None] * len(items)
    pending: list[tuple[int, int]] = []
    try:
        with host.pool.sftp() as c:
            try:
                for i, (partial, final, overwrite, _size) in enumerate(items):
                    names.touch(final)  # noted before the request goes out (see KnownNames)
                    if overwrite:
                        num = adapter.send(
                            c, adapter.CMD_EXTENDED, "posix-rename@openssh.com", wire(partial), wire(final)
                        )
                    else:
                        num = adapter.send(c, adapter.CMD_RENAME, wire(partial), wire(final))
                    pending.append((i, num))
            finally:
                failed: list[tuple[int, BaseException]] = []
                for i, num in pending:
                    try:
                        adapter.reply(c, num)
                    except Exception as refusal:
                        failed.append((i, refusal))
            for i, why in failed:
                # The server's "no" is an OSError (paramiko maps SFTP status codes to them); an
                # EOF or SSHException means the connection went: handled below.
                if not isinstance(why, OSError) or isinstance(why, ConnectionError | TimeoutError):
                    raise why
                _partial, final, overwrite, _size = items[i]
                try:
                    c.lstat(wire(final))
                    taken = not overwrite
                except OSError:
                    taken = False
                results[i] = (
                    AlreadyExists(f"Already exists: {backend.display(final)}")
                    if taken
                    else map_error(why, backend.display(final))
                )
    except Exception as exc:  # the connection went: which renames did the server do?
        drop = exc if isinstance(exc, FerryError) else Transient(f"Connection lost while committing: {exc}")
        for i, item in enumerate(items):
            if results[i] is None and not _landed(host, *item):
                results[i] = drop
    return results


def _landed(host: Host, partial: str, final: str, _overwrite: bool, size: int) -> bool:
    try:
        with host.pool.sftp() as c:
            try:
                c.lstat(wire(partial))
                return False
            except FileNotFoundError:
                pass
            attr = c.lstat(wire(final))
            return stat_mod.S_ISREG(attr.st_mode or 0) and attr.st_size == size
    except Exception:
        return False


# ---- down ----


Fetched = tuple[Entry, bytes | bytearray]  # a file's attributes and bytes, read from a tar stream


def _norm(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name


def read_batch(backend: OnHost, paths: Sequence[str]) -> list[Fetched | BaseException]:
    """Each path's current attributes and bytes from one ``tar -c``, or the exception it met
    (any exception: move that file per file, which reports its real problem)."""
    host = backend._host
    results: list[Fetched | BaseException] = [Unsupported("not fetched in a tar batch")] * len(paths)
    asked = _plan_download(paths)
    if asked is None:
        return results
    base, rels, args = asked
    command = f"cd -- {shlex.quote(base)} && exec tar -c -f - --no-recursion {' '.join(args)}"
    chan, generation = host.pool.open_channel(
        lambda transport: transport.open_session(
            window_size=limits.WINDOW, max_packet_size=limits.MAX_PACKET, timeout=30
        )
    )
    try:
        got, stream_broke, err, rc = _fetch(host, chan, command, rels, paths, backend.display)
    except Exception as exc:
        mapped = exc if isinstance(exc, FerryError) else map_error(exc, host.target.hostname)
        for i in rels.values():
            results[i] = mapped
        return results
    finally:
        chan.close()
        host.pool.release(generation)
    text = err.decode("utf-8", "replace")
    if rc != 0:
        got = _named_by_tar(text, rels, paths, got, backend.display)
    broke = Transient(f"tar stream from {host.target.hostname} ended early", detail=str(stream_broke or text[-300:]))
    for i in rels.values():
        results[i] = got.get(i, broke)
    state(host).downloads += sum(1 for r in got.values() if isinstance(r, tuple))
    return results


def _plan_download(paths: Sequence[str]) -> tuple[str, dict[str, int], list[str]] | None:
    """The folder to work in, the members asked for (name relative to it -> index in
    ``paths``) and their names quoted for the command line; None if nothing can go."""
    wanted: dict[str, int] = {}
    for i, p in enumerate(paths):
        if safe_name(p):
            wanted.setdefault(p, i)
    base = _base_of([posixpath.dirname(p) for p in wanted]) if wanted else None
    if base is None:
        return None
    rels = {_norm(posixpath.relpath(p, base)): i for p, i in wanted.items()}
    args: list[str] = []
    size = 0
    for rel in list(rels):
        arg = shlex.quote("./" + rel)
        if size + len(arg) + 1 > MAX_COMMAND:
            del rels[rel]  # left for per-file (the caller keeps batches far below this)
            continue
        args.append(arg)
        size += len(arg) + 1
    return base, rels, args


def _fetch(
    host: Host, chan: Any, command: str, rels: dict[str, int], paths: Sequence[str], display: Callable[[str], str]
) -> tuple[dict[int, Fetched | BaseException], BaseException | None, bytes, int]:
    """Run ``command`` on ``chan`` and read its archive: what each member asked for gave, why
    the stream broke off (None if it did not), and the command's stderr and exit status."""
    chan.settimeout(120)
    reader = _Reader(chan)
    # No EOF is sent: tar -c reads no input, and an EOF racing the end of a fast command can
    # cost the whole connection (see _extract_command).
    chan.exec_command(command.encode("utf-8"))
    got: dict[int, Fetched | BaseException] = {}
    stream_broke: BaseException | None = None
    try:
        _take_members(reader, rels, paths, display, got)
        reader.drain()  # the zeros tar pads its last record with
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        log.info("tar stream from %s broke off: %s", host.target.hostname, exc)
        stream_broke = exc
    err, rc = b"", -1
    try:
        err = chan.makefile_stderr("rb").read()
        rc = chan.recv_exit_status()
    except Exception:
        rc = -1
    return got, stream_broke, err, rc


def _take_members(
    reader: _Reader,
    rels: dict[str, int],
    paths: Sequence[str],
    display: Callable[[str], str],
    got: dict[int, Fetched | BaseException],
) -> None:
    """Each member asked for into ``got`` (by its index in ``paths``); anything else is skipped."""
    for name, size, mtime, regular, mode in _members(reader):
        found = rels.get(_norm(name))
        if found is None or found in got or not regular:
            reader.skip(size + (-size % tarfile.BLOCKSIZE))
            if found is not None and found not in got:
                got[found] = Unsupported(f"{display(paths[found])} is not a regular file")
            continue  # not asked for (or twice): never trusted
        data = bytearray(size)  # each byte copied once, from the channel straight into place
        reader.fill(memoryview(data))
        reader.skip(-size % tarfile.BLOCKSIZE)
        when = datetime.fromtimestamp(int(mtime), UTC)
        got[found] = (Entry(paths[found], posixpath.basename(paths[found]), Kind.FILE, size, when, mode=mode), data)


def _named_by_tar(
    text: str,
    rels: dict[str, int],
    paths: Sequence[str],
    got: dict[int, Fetched | BaseException],
    display: Callable[[str], str],
) -> dict[int, Fetched | BaseException]:
    """``got`` after a failed ``tar -c``. GNU tar pads a file that shrank while it read it with
    zeros and says so only on stderr (exit 1): a file it named is never trusted; if it named
    none of ours, none is."""
    lines = text.splitlines()
    named = {i: [line for line in lines if f"./{rel}:" in line] for rel, i in rels.items()}
    named = {i: said for i, said in named.items() if said}
    if not named:
        got = {}
    for i, said in named.items():
        shown = display(paths[i])
        gone = any("No such file" in line for line in said)
        got[i] = (
            NotFound(f"No such file: {shown}")
            if gone
            else Transient(f"remote tar could not read {shown}", detail=" ".join(said)[-500:])
        )
    return got


class _Reader:
    """A channel's stdout read in exact amounts. With the lean paths on, through a
    :class:`~ferry.backends.sftp.paramiko_adapter.ChunkPipe` straight into the caller's buffer (one copy);
    ``tarfile``'s stream reader over paramiko's pipe copied each byte four times (the pipe's
    array, its slices, tarfile's buffer, the member's read): 1,000 x 1 MiB down, profiled, spent
    more there than in writing the files. Put in place before the command starts, so no byte is
    fed to the pipe it replaces."""

    def __init__(self, chan: Any) -> None:
        self._chan = chan
        self._pipe = adapter.install_pipe(chan)
        self._scratch = memoryview(bytearray(64 << 10))

    def fill(self, view: memoryview) -> None:
        """Exactly ``len(view)`` bytes into ``view``; EOFError if the stream ends first."""
        if self._pipe is not None:
            adapter.recv_exact_into(self._chan, self._pipe, view)
            return
        got = 0
        while got < len(view):
            piece = self._chan.recv(len(view) - got)
            if not piece:
                raise EOFError("the SSH channel closed")
            view[got : got + len(piece)] = piece
            got += len(piece)

    def skip(self, count: int) -> None:
        while count > 0:
            n = min(count, len(self._scratch))
            self.fill(self._scratch[:n])
            count -= n

    def drain(self) -> None:
        """Read to the end of the stream (what is left after the end-of-archive block)."""
        try:
            while True:
                self.fill(self._scratch[: tarfile.BLOCKSIZE])
        except EOFError:
            pass


_REGULAR = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)


def _members(reader: _Reader) -> Iterator[tuple[str, int, float, bool, int]]:
    """``(name, size, mtime, regular, permission bits)`` of each member of a tar stream, its data left for the
    caller to read (``size`` bytes, then the padding to a whole block). Headers are parsed by
    ``tarfile.TarInfo.frombuf`` (checksum checked); GNU long names (``L``) and pax headers
    (``x``: path, size, mtime) apply to the member after them, as tar writes them. Ends at the
    end-of-archive block; EOFError if the stream ends before it."""
    block = bytearray(tarfile.BLOCKSIZE)
    long_name: str | None = None
    pax: dict[str, str] = {}
    while True:
        reader.fill(memoryview(block))
        if not any(block):
            return
        info = tarfile.TarInfo.frombuf(bytes(block), "utf-8", "surrogateescape")
        padded = info.size + (-info.size % tarfile.BLOCKSIZE)
        if info.type in (tarfile.GNUTYPE_LONGNAME, tarfile.XHDTYPE, tarfile.XGLTYPE):
            data = bytearray(padded)
            reader.fill(memoryview(data))
            if info.type == tarfile.GNUTYPE_LONGNAME:
                long_name = bytes(data[: info.size]).split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            elif info.type == tarfile.XHDTYPE:
                pax = _pax_records(bytes(data[: info.size]))
            continue  # a global header (g) changes nothing Ferry reads
        name = pax.get("path", long_name if long_name is not None else info.name)
        size = int(pax["size"]) if "size" in pax else info.size
        mtime = float(pax["mtime"]) if "mtime" in pax else float(info.mtime)
        long_name, pax = None, {}
        yield name, size, mtime, info.type in _REGULAR, info.mode & 0o7777


def _pax_records(data: bytes) -> dict[str, str]:
    """``LEN key=value\n`` records of a pax extended header; ValueError if malformed."""
    out: dict[str, str] = {}
    at = 0
    while at < len(data):
        space = data.index(b" ", at)
        length = int(data[at:space])
        if length <= 0 or at + length > len(data):
            raise ValueError("bad pax record length")
        key, _, value = data[space + 1 : at + length - 1].partition(b"=")
        out[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        at += length
    return out
