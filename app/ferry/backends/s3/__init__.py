"""S3 buckets (AWS and S3-compatible stores: MinIO, Ceph RGW, rclone, moto): ``s3://bucket/key``.

Modules by role, imported one way (each uses only those listed before it; ``backend`` uses the
rest and none of them imports it):

- ``settings``: :class:`S3Settings`, everything a backend is told, read once from the environment
  and a saved site (``S3Settings.from_env``, ``settings_for``) and passed in;
- ``errors``: botocore's exceptions and S3's error answers as Ferry's (``map_error``);
- ``names``: keys that cannot be local file names, refused or mapped reversibly;
- ``lean``: the lean client, Ferry's own SigV4 signer and HTTP/1.1 beside botocore: the one
  adapter module (a contract test against botocore's signer, pinned botocore versions,
  ``FERRY_S3_FAST=0`` turns it off);
- ``client``: botocore's session and client (profiles, endpoints, sites), and when the
  environment alone decides;
- ``connection``: :class:`~ferry.backends.s3.connection.S3Connection`, one bucket's clients and
  each request sent lean first, botocore otherwise;
- ``known``: what a backend knows without asking (prefixes seen empty, stat's first bytes);
- ``checksums``, ``probes``: what a store really checks on uploads, and its habits with
  ``If-None-Match`` and folder markers, each found out once;
- ``evidence``: downloads compared with what the store keeps;
- ``reader``: GetObject bodies, and large objects as parallel ranges;
- ``restore``: archived objects, restores asked and waited for;
- ``entries``: listings and answers as entries;
- ``multipart``: part sizes, multipart copies, ListParts, unfinished uploads;
- ``writer``: one object written (a single PUT, or parallel multipart within a memory budget);
- ``share``: pre-signed links;
- ``backend``: :class:`S3Backend`.
"""

from __future__ import annotations

from ferry.backends.s3.backend import S3Backend
from ferry.backends.s3.errors import Archived, NoSuchBucket
from ferry.backends.s3.settings import S3Settings

__all__ = ["Archived", "NoSuchBucket", "S3Backend", "S3Settings"]
