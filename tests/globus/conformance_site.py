"""A Globus collection with HTTPS (GCSv5 style) as a conformance-suite site.

The collection lives in the local fake (:mod:`globus.fake_globus`): its Transfer API answers
ls/stat/mkdir/rename and delete tasks, its HTTPS server the reads and writes. ``tests/conformance/
conftest.py`` imports :func:`globus_site` as its ``globus`` factory; a fresh fake per test, Ferry's
process pointed at it through ``GLOBUS_SDK_SERVICE_URL_*`` and a client credential.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from globus.fake_globus import FakeGlobusServer


def globus_site(tmp_path: Path, site_cls: Any) -> Iterator[Any]:
    from ferry.backends.globus import GlobusBackend
    from ferry.core.address import Address
    from ferry.credentials import globus_auth

    with FakeGlobusServer() as server:
        env = {**server.env(), "FERRY_CONFIG_DIR": str(tmp_path / "config"), "FERRY_DATA_DIR": str(tmp_path / "data")}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        globus_auth.reset_shared_auth()
        try:
            cid = server.fake.add_collection(name="conformance")
            server.fake.enable_https(cid)
            server.fake.put(cid, "/conformance", None)
            backend = GlobusBackend(Address("globus", "/", host=cid))
            yield site_cls(backend, "/conformance")
            backend.close()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            globus_auth.reset_shared_auth()
