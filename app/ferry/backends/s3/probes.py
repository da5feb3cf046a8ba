"""What a store does with two kinds of request, found out once per backend with throw-away keys
(``.ferry-probe-…``, ``.ferry-marker-probe-…``, deleted at once):

* does it refuse a PUT with ``If-None-Match: *`` onto an existing key (AWS and moto do, ``rclone
  serve s3`` does not)? Where it does, a no-overwrite commit needs no HEAD first (one request
  less per file);
* do ``prefix/`` folder markers stay markers? Stores backed by a file system (``rclone serve
  s3``) turn ``name/`` into a file ``name``, which would then block every key under it.

Lean requests where they serve: an upload then never builds botocore's client just for a probe
(~0.15 s of CPU: its import and S3 model, on a worker thread).
"""

from __future__ import annotations

import threading
import uuid

from ferry.backends.s3.connection import S3Connection
from ferry.backends.s3.errors import error_code


class StoreProbes:
    def __init__(self, conn: S3Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self._conditional: bool | None = None
        self._markers: bool | None = None

    def conditional_writes(self) -> bool:
        """Whether the store refuses ``If-None-Match: *`` onto an existing key (probed once, under
        a lock: once per backend, not once per worker that gets here first)."""
        if self._conditional is None:
            with self._lock:
                if self._conditional is None:
                    self._conditional = self._probe_conditional()
        return self._conditional

    def _probe_conditional(self) -> bool:
        conn = self._conn
        probe = f".ferry-probe-{uuid.uuid4().hex[:12]}"
        try:
            conn.put_object(probe, b"", {})
            try:
                conn.put_object(probe, b"", {"IfNoneMatch": "*"})
            except Exception as exc:
                conditional = error_code(exc) in ("PreconditionFailed", "412")
            else:
                conditional = False
            conn.delete_object(probe)
        except Exception:
            return False  # cannot tell (no write access?): check with a HEAD
        return conditional

    def keeps_markers(self) -> bool:
        """Whether ``prefix/`` marker objects stay markers (probed by the first mkdir)."""
        if self._markers is None:
            conn = self._conn
            probe = f".ferry-marker-probe-{uuid.uuid4().hex[:12]}"
            try:
                conn.put_object(probe + "/", b"", {})
            except Exception as exc:
                raise conn.err(exc, "checking folder markers") from exc
            try:
                conn.head_object(probe)
            except Exception:
                self._markers = True
            else:
                self._markers = False
            for k in (probe + "/", probe):
                try:
                    conn.delete_object(k)
                except Exception:
                    pass
        return self._markers
