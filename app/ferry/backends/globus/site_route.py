"""The Globus route between saved SSH and S3 sites that name the Globus collection serving them.

A saved site may say which collection serves its storage and how its paths map onto the
collection's (:class:`~ferry.credentials.sites.GlobusLink`). When both ends of a job are such
sites, or one is a Globus collection and the other such a site, :func:`site_route` offers one
Globus task between the two collections for the whole job (:class:`SiteGlobusDelegation`): the
job's paths are mapped onto the collections before submitting and the task's rows mapped back, so
the queue records the job in the sites' own paths. The service checks every file (its checksum:
level ``service``), and the task runs with this computer off.

Which sites serve an end: the saved sites of the same scheme on the same host (SSH: the same
user and port where both say one; S3: the same bucket) that name a collection. A queued job
records plain URLs without the site's name, so the site is found again this way; of two sites on
one host, the one whose mapping covers a path most specifically serves it.

Why not where it cannot: :class:`~ferry.backends.base.NoDirectRoute` with one sentence (not
logged in to Globus; a path outside the site's mapping; the job's paths in two collections).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace

from ferry.backends.base import Backend, DelegatedJob, DelegatedRow, DelegationSink, NoDirectRoute
from ferry.backends.globus.backend import GlobusBackend
from ferry.backends.globus.tasks import GlobusDelegation
from ferry.core.address import Address
from ferry.core.cancel import CancelToken
from ferry.core.errors import FerryError
from ferry.core.outcomes import TaskState, Verification
from ferry.core.progress import Accounting
from ferry.credentials.sites import GlobusLink, SiteStore, globus_link

log = logging.getLogger(__name__)

SITE_SCHEMES = ("sftp", "s3")


@dataclass(frozen=True)
class SiteEnd:
    """One end of the route: a Globus collection itself (``links`` empty: paths are its own), or
    the saved sites (their links) that serve an SSH host's or S3 bucket's storage."""

    backend: Backend
    links: tuple[GlobusLink, ...]

    def label(self, paths: list[str]) -> str:
        """How the route names this end: the sites serving ``paths``, or the collection."""
        if not self.links:
            return self.backend.address.site or f"globus://{self.backend.address.host}"
        names = set()
        for path in paths:
            try:
                link = self.link_for(path)
            except NoDirectRoute:
                link = None
            if link is not None:
                names.add(link.site)
        return "|".join(sorted(names)) or self.backend.display("")

    def link_for(self, path: str) -> GlobusLink | None:
        """The link whose mapping covers ``path`` most specifically, None if none does."""
        scored = [(n, link) for link in self.links if (n := link.covers(path)) is not None]
        if not scored:
            return None
        best = max(n for n, _ in scored)
        chosen = {link.collection: link for n, link in scored if n == best}
        if len(chosen) > 1:
            raise NoDirectRoute(
                f"{self.backend.display(path)} is mapped to two Globus collections "
                f"(sites {', '.join(sorted(link.site for link in chosen.values()))})"
            )
        return next(iter(chosen.values()))


def _sites_serving(backend: Backend) -> tuple[GlobusLink, ...]:
    """The links of the saved sites on this backend's host (SSH) or bucket (S3) naming a collection."""
    address = backend.address
    try:
        sites = SiteStore().list()
    except FerryError as exc:  # a broken sites.toml must not stop a job: no Globus route, said in the log
        log.warning("saved sites not read for the Globus route: %s", exc)
        return ()
    links: list[GlobusLink] = []
    for site in sites:
        try:
            link = globus_link(site)
        except FerryError:
            continue
        if link is not None and _same_storage(site.base_address(), address):
            links.append(link)
    return tuple(links)


def _same_storage(base: Address, address: Address) -> bool:
    if base.scheme != address.scheme or base.host.lower() != address.host.lower():
        return False
    if base.user and address.user and base.user != address.user:
        return False
    return not (base.port and address.port and base.port != address.port)


def _end(backend: Backend) -> SiteEnd | None:
    if isinstance(backend, GlobusBackend):
        return SiteEnd(backend, ())
    if backend.scheme not in SITE_SCHEMES:
        return None
    links = _sites_serving(backend)
    return SiteEnd(backend, links) if links else None


def site_route(src: Backend, dst: Backend) -> SiteGlobusDelegation | None:
    """The Globus route for this pair, None when it is not a pair of sites (or collections) that
    name collections; :class:`NoDirectRoute` when it is but cannot be used now."""
    if isinstance(src, GlobusBackend) and isinstance(dst, GlobusBackend):
        return None  # collection to collection: the Globus backend's own delegation
    a = _end(src)
    b = _end(dst) if a is not None else None
    if a is None or b is None:
        return None
    route = SiteGlobusDelegation(a, b)
    what = "Globus route between the collections serving these sites"
    try:
        from ferry.credentials.globus_auth import shared_auth

        logged_in = shared_auth().logged_in()
    except FerryError as exc:
        why = f"Globus cannot be used here ({exc.message})"
        raise NoDirectRoute(f"{why}, so the {what} was not taken") from None
    if not logged_in:
        raise NoDirectRoute(f"not logged in to Globus ('ferry globus login'), so the {what} was not taken")
    return route


class SiteGlobusDelegation:
    """One job between two sites' collections as one Globus task (see the module's docstring)."""

    def __init__(self, src: SiteEnd, dst: SiteEnd) -> None:
        self.src = src
        self.dst = dst

    def route_label(self, job: DelegatedJob) -> str:
        """``globus cluster -> store``: what the job shows as its route."""
        src = self.src.label([s for s, _d, _r in job.roots])
        dst = self.dst.label([d for _s, d, _r in job.roots])
        return f"globus {src} -> {dst}"

    def run_job(self, job: DelegatedJob, sink: DelegationSink) -> None:
        """Map the job onto the two collections (NoDirectRoute before anything is submitted when a
        path is outside a mapping), then run it as any Globus task, rows mapped back."""
        src_map, dst_map = _Mapping(self.src), _Mapping(self.dst)
        roots = tuple((src_map.forward(s), dst_map.forward(d), rel) for s, d, rel in job.roots)
        src_coll, dst_coll = src_map.collection(), dst_map.collection()
        src_map.roots = {cs: s for (s, _d, _r), (cs, _cd, _r2) in zip(job.roots, roots, strict=True)}
        dst_map.roots = {cd: d for (_s, d, _r), (_cs, cd, _r2) in zip(job.roots, roots, strict=True)}
        GlobusDelegation(src_coll, dst_coll).run_job(replace(job, roots=roots), _MappedSink(sink, src_map, dst_map))


class _Mapping:
    """One end's paths to and from its collection, for one job."""

    def __init__(self, end: SiteEnd) -> None:
        self.end = end
        self.links: set[GlobusLink] = set()
        self.roots: dict[str, str] = {}  # a root's collection path -> the job's own path

    def forward(self, path: str) -> str:
        if not self.end.links:
            return path
        link = self.end.link_for(path)
        mapped = link.to_collection(path) if link is not None else None
        if link is None or mapped is None:
            mapped = ", ".join(sorted(f"{lk.site}: {' '.join(sp for sp, _cp in lk.pairs)}" for lk in self.end.links))
            raise NoDirectRoute(
                f"{self.end.backend.display(path)} is outside the folders saved sites map to Globus ({mapped})"
            )
        self.links.add(link)
        return mapped

    def collection(self) -> GlobusBackend:
        if isinstance(self.end.backend, GlobusBackend):
            return self.end.backend
        collections = {link.collection for link in self.links}
        if len(collections) != 1:
            raise NoDirectRoute("the job's paths on one side lie in different Globus collections")
        return GlobusBackend(Address("globus", "/", host=collections.pop()))

    def to_collection(self, path: str) -> str:
        return self.forward(path) if self.end.links else path

    def back(self, path: str) -> str:
        """The job's own path of a collection path (a root exactly, else through the mapping)."""
        if path in self.roots:
            return self.roots[path]
        for link in self.links:
            site = link.from_collection(path)
            if site is not None:
                return site
        return path


@dataclass
class _MappedSink:
    """The engine's sink seen in collection paths: rows go in mapped back to the sites' paths."""

    inner: DelegationSink
    src: _Mapping
    dst: _Mapping

    @property
    def accounting(self) -> Accounting:
        return self.inner.accounting

    @property
    def cancel(self) -> CancelToken:
        return self.inner.cancel

    def value(self, key: str) -> str | None:
        return self.inner.value(key)

    def set_value(self, key: str, value: str | None) -> None:
        self.inner.set_value(key, value)

    def open_rows(self) -> Iterator[DelegatedRow]:
        for r in self.inner.open_rows():
            yield replace(r, src=self.src.to_collection(r.src), dst=self.dst.to_collection(r.dst))

    def finish_rows(
        self,
        rows: list[DelegatedRow],
        state: TaskState,
        *,
        verification: Verification | None = None,
        error: str | None = None,
        error_kind: str | None = None,
    ) -> None:
        back = [replace(r, src=self.src.back(r.src), dst=self.dst.back(r.dst)) for r in rows]
        self.inner.finish_rows(back, state, verification=verification, error=error, error_kind=error_kind)

    def job_changed(self, message: str) -> None:
        self.inner.job_changed(message)
