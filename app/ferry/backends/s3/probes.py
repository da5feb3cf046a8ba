"""What a store does with two kinds of request, found out without leaving anything behind (a
probe object would outlive its delete in a versioned bucket, as a version or a delete marker,
where the user may not delete versions; and a key outside the user's folder may be refused):

* does it refuse a PUT with ``If-None-Match: *`` onto an existing key (AWS and moto do, ``rclone
  serve s3`` does not)? Where it does, a no-overwrite commit needs no HEAD first (one request
  less per file). AWS is known to; elsewhere the first small no-overwrite upload tells: once it
  has landed, the same PUT goes once more, and a store that honours the condition refuses it
  (412) while one that ignores it stores the same bytes again. Until then every no-overwrite
  commit HEADs its key first. No throw-away object at all;
* do ``prefix/`` folder markers stay markers? Stores backed by a file system (``rclone serve
  s3``) turn ``name/`` into a file ``name``, which would then block every key under it. Found
  with the first folder Ferry makes, next to it (see :meth:`StoreProbes.keeps_markers`).
"""

from __future__ import annotations

import threading
import uuid

from ferry.backends.s3.client import is_aws
from ferry.backends.s3.connection import S3Connection
from ferry.backends.s3.errors import NoSuchBucket
from ferry.core.errors import AlreadyExists, NotFound

# An ETag no object has: a PUT with ``If-Match`` on it stores nothing where conditions are honoured.
NO_ETAG = '"00000000000000000000000000000000"'


class StoreProbes:
    def __init__(self, conn: S3Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self._conditional: bool | None = None
        self._markers: bool | None = None

    def conditional_writes(self) -> bool:
        """Whether the store is known to refuse ``If-None-Match: *`` onto an existing key."""
        if self._conditional is None and self._on_aws():
            self._conditional = True  # documented by AWS (2024): no request to find out
        return self._conditional is True

    def conditional_known(self) -> bool:
        """Whether :meth:`conditional_writes` is decided (else an upload may tell, see
        :meth:`learn_conditional`)."""
        return self.conditional_writes() or self._conditional is not None

    def learn_conditional(self, honoured: bool) -> None:
        """What a repeated no-overwrite PUT of an object just written showed (see the module)."""
        with self._lock:
            if self._conditional is None:
                self._conditional = honoured

    def _on_aws(self) -> bool:
        conn = self._conn
        lean = conn.lean
        endpoint = f"{lean.scheme}://{lean.netloc}" if lean is not None else conn.client.meta.endpoint_url
        return is_aws(endpoint)

    def markers_refused(self) -> bool:
        """Whether this store is known to turn ``name/`` markers into files (write none then)."""
        return self._markers is False

    def keeps_markers(self, folder: str) -> bool:
        """Whether ``prefix/`` marker objects stay markers, found once, in ``folder`` (where the
        user is making a folder: inside what the credentials may write). The probe marker goes with
        ``If-Match`` on an ETag no object has: a store that honours conditions (AWS, moto, MinIO) is
        an object store that keeps markers, and stores nothing, so a versioned bucket keeps no
        version or delete marker of it. Elsewhere the probe lands and a HEAD of its name without
        the ``/`` tells; both are deleted (by version where the store gave one)."""
        if self._markers is not None:
            return self._markers
        with self._lock:
            if self._markers is None:
                self._markers = self._probe_markers(folder)
        return self._markers

    def _probe_markers(self, folder: str) -> bool:
        conn = self._conn
        probe = f"{folder.strip('/') + '/' if folder.strip('/') else ''}.ferry-marker-probe-{uuid.uuid4().hex[:12]}"
        try:
            answer = conn.put_object(probe + "/", b"", {"IfMatch": NO_ETAG})
        except Exception as exc:
            err = conn.err(exc, "checking folder markers")
            if isinstance(err, NotFound | AlreadyExists) and not isinstance(err, NoSuchBucket):
                return True  # refused by the condition: nothing stored
            raise err from exc
        version = str(answer.get("VersionId") or "")
        try:
            conn.head_object(probe)
        except Exception:
            keeps = True
        else:
            keeps = False
        conn.discard_object(probe + "/", version)
        if not keeps:
            conn.discard_object(probe)  # the file the marker became
        return keeps
