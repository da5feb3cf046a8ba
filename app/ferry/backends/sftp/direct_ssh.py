"""Site to site: one SSH host copies straight to another, not through this computer.

The SFTP backend's delegation for an (sftp, sftp) pair on different hosts or accounts
(:func:`host_pair_route`). Ferry lists the source and decides each file, as on the host ↔ S3 route
(``direct.py``, whose job loop this reuses); the bytes go from host A to host B over an SSH
connection **A opens itself**, with A's own key and ``known_hosts`` (``ssh -o BatchMode=yes``: no
password, no question, no agent forwarded from here, no key copied to A). Where the account on A
needs an ssh config of its own for that, ``FERRY_SSH_CONFIG`` in A's environment names it.

Probe (once per pair per process): A runs ``ssh -o BatchMode=yes -o ConnectTimeout=5 -p PORT
USER@B true``; if that fails, :class:`~ferry.backends.base.NoDirectRoute` says in one sentence that
A cannot log in to B by itself.

Per file: Ferry looks at what exists at B through its own SFTP session (the job's confined view:
no link below the destination followed) and applies the conflict policy; A hashes the source
(``sha256sum``) and streams it with ``ssh B 'cat > PARTIAL'`` into a fresh partial name beside the
file (created with ``set -C`` after removing any old one: never through a link); B hashes what
landed; the two SHA-256s are compared, and only then does Ferry's session to B rename the partial
file into place. Where either host lacks ``sha256sum`` the check is the size only, said so.
"""

from __future__ import annotations

import posixpath
import shlex
import threading
from typing import cast

from ferry.backends.base import (
    Backend,
    DelegatedJob,
    DelegatedRow,
    DelegationSink,
    Entry,
    NoDirectRoute,
    UrlSigner,
    temp_name,
)
from ferry.backends.sftp.direct import _IN_PLACE, HostS3Route, HostTools, _Outcome, redact
from ferry.backends.sftp.shell import RemoteShell
from ferry.core.errors import AlreadyExists, ChecksumMismatch, FerryError, NotFound, Transient
from ferry.core.outcomes import Evidence, Level, TaskState, Verification

_probed: dict[tuple[str, str], tuple[bool, bool] | str] = {}
_probe_lock = threading.Lock()
_SSH_OPTS = '${FERRY_SSH_CONFIG:+-F "$FERRY_SSH_CONFIG"} -a -x -o BatchMode=yes -o ConnectTimeout=5'


def forget_pair_probes() -> None:
    """Probe again on next use (tests)."""
    with _probe_lock:
        _probed.clear()


def _target(backend: Backend) -> tuple[str, str, int]:
    t = backend._host.target  # type: ignore[attr-defined]  # an SFTPBackend's resolved target
    return str(t.hostname), str(t.user), int(t.port)


def ssh_to(dst: Backend, remote_command: str) -> str:
    """The command that, run on the source host, runs ``remote_command`` on ``dst``."""
    hostname, user, port = _target(dst)
    return f"ssh {_SSH_OPTS} -p {port} {shlex.quote(f'{user}@{hostname}')} {shlex.quote(remote_command)}"


def _probe_once(src: Backend, a: RemoteShell, dst: Backend, b: RemoteShell) -> tuple[bool, bool] | str:
    name_a = src.address.host or src.endpoint
    name_b = dst.address.host or dst.endpoint
    has_sha = "command -v sha256sum >/dev/null 2>&1 && echo sha=1"
    _rc, out, _err = a.run(f"echo probe=ferry; {has_sha}; {ssh_to(dst, 'true')} </dev/null; echo ssh=$?", timeout=60)
    words = out.decode(errors="replace").split()
    if "probe=ferry" not in words:
        return f"the host {name_a} runs no shell commands for Ferry"
    if "ssh=0" not in words:
        return f"the host {name_a} cannot log in to {name_b} by itself (no key of its own for it, or no way there)"
    _rc, out_b, _err = b.run(f"echo probe=ferry; {has_sha}", timeout=60)
    if b"probe=ferry" not in out_b.split():
        return f"the host {name_b} runs no shell commands for Ferry"
    return "sha=1" in words, b"sha=1" in out_b.split()


def host_pair_route(src: Backend, a: RemoteShell, dst: Backend, b: RemoteShell) -> HostHostRoute | None:
    """The direct route from SSH host ``src`` (commands by ``a``) to SSH host ``dst`` (by ``b``);
    None when both are the same account on the same host; :class:`NoDirectRoute` when ``src``
    cannot log in to ``dst`` by itself."""
    if src.endpoint == dst.endpoint or _target(src) == _target(dst):  # one account: not a pair
        return None
    key = (src.endpoint, dst.endpoint)
    with _probe_lock:
        found = _probed.get(key)
        if found is None:
            try:
                found = _probe_once(src, a, dst, b)
            except FerryError as exc:  # a session failed: asked again next time
                raise NoDirectRoute(f"the hosts run no commands for Ferry ({exc.message})") from exc
            _probed[key] = found
    if isinstance(found, str):
        raise NoDirectRoute(found)
    return HostHostRoute(src, a, dst, b, sha_a=found[0], sha_b=found[1])


class HostHostRoute(HostS3Route):
    """One Ferry job copied by host A straight to host B (see the module's docstring). The job
    loop, walk, records and conflict policy are :class:`HostS3Route`'s, with B as the written host."""

    def __init__(self, src: Backend, a: RemoteShell, dst: Backend, b: RemoteShell, *, sha_a: bool, sha_b: bool) -> None:
        tools = HostTools(sha256="sha256sum", md5=None)
        # ``host``/``shell`` are the written host (B): the loop writes through host.confined(...).
        super().__init__(dst, b, src, cast(UrlSigner, None), tools, upload=False)  # no store: nothing signed
        self.src, self.dst = src, dst
        self.a = a
        self.checked = sha_a and sha_b
        lacking = [h.address.host for h, has in ((src, sha_a), (dst, sha_b)) if not has]
        self.unchecked = f"size only: {' and '.join(lacking)} has no sha256sum" if lacking else ""

    @property
    def route(self) -> str:
        return f"direct: {self.src.address.host} → {self.dst.address.host}"

    def _one_file(
        self, job: DelegatedJob, writer: Backend, row: DelegatedRow, entry: Entry, sink: DelegationSink
    ) -> _Outcome:
        if sink.cancel.cancelled:
            return _Outcome(row, TaskState.QUEUED)
        try:
            return self._copy(job, writer, row, entry)
        except FerryError as exc:
            return _Outcome(row, TaskState.FAILED, error=redact(exc.message), error_kind=exc.kind)
        except Exception as exc:  # a bug or a library's surprise: this file fails, the job goes on
            return _Outcome(row, TaskState.FAILED, error=f"{type(exc).__name__}: {exc}")

    def _hash(self, shell: RemoteShell, owner: Backend, path: str) -> tuple[int, str | None]:
        """(size, SHA-256 or None where not checked) of the regular file ``path`` on ``owner``."""
        q = shlex.quote(path)
        tool = ' && sha256sum < "$f"' if self.checked else ""
        rc, out, err = shell.run(f'f={q}; [ -f "$f" ] && [ ! -L "$f" ] || exit 3; wc -c < "$f"{tool}', timeout=3600)
        words = out.decode(errors="replace").split()
        if rc == 3:
            raise NotFound(f"Not a regular file: {owner.display(path)}")
        if rc != 0 or len(words) < (2 if self.checked else 1):
            raise Transient(f"Could not hash {owner.display(path)}: {err.decode(errors='replace').strip() or rc}")
        return int(words[0]), (words[1].lower() if self.checked else None)

    def _verification(self, sha: str | None, note: str) -> Verification:
        if sha is None:
            return Verification(Level.SIZE, None, (), self.unchecked)
        return Verification(Level.CHECKSUM, "sha256", (Evidence.HOST_TOOL,), note, digest=sha)

    def _copy(self, job: DelegatedJob, writer: Backend, row: DelegatedRow, entry: Entry) -> _Outcome:
        size, sha = self._hash(self.a, self.src, row.src)
        folder, name = posixpath.split(row.dst)
        try:
            there = writer.stat(row.dst)
        except NotFound:
            there = None
        if there is not None:
            if there.kind is entry.kind and self.checked and self._hash(self.shell, self.dst, row.dst) == (size, sha):
                return _Outcome(row, TaskState.DONE, self._verification(sha, _IN_PLACE))
            kept = self._policy(job, row)
            if kept is not None:
                return kept
        writer.mkdir(folder, parents=True, exist_ok=True)
        partial = posixpath.join(folder, temp_name(name, f"direct{job.id}"))
        q = shlex.quote(partial)
        send = ssh_to(self.dst, f"rm -f {q} && set -C && cat > {q}")
        try:
            rc, _out, err = self.a.run(f"{send} < {shlex.quote(row.src)}", timeout=24 * 3600)
            if rc != 0:
                words = err.decode(errors="replace").strip()
                raise Transient(f"{self.src.address.host} could not send {row.src} to {self.dst.address.host}: {words}")
            landed, landed_sha = self._hash(self.shell, self.dst, partial)
            if landed != size:
                raise ChecksumMismatch(f"{landed:,} bytes landed on {self.dst.address.host}, the source has {size:,}")
            if landed_sha != sha:
                raise ChecksumMismatch("the SHA-256 of what landed differs from the source's")
            try:
                writer.rename(partial, row.dst, overwrite=there is not None)
            except AlreadyExists:
                return _Outcome(row, TaskState.SKIPPED, error=f"kept: {self.dst.display(row.dst)} appeared meanwhile")
        except BaseException:
            self.shell.run(f"rm -f {q}", timeout=60)
            raise
        v = self._verification(sha, "sha256 match: both hosts' own SHA-256")
        if job.preserve_mtime and entry.own_mtime is not None:
            try:
                writer.set_mtime(row.dst, entry.own_mtime, entry.own_mtime_ns)
            except FerryError as exc:
                v = v.with_note(f"time not kept: {exc.message}")
        return _Outcome(row, TaskState.DONE, v, moved=size)
