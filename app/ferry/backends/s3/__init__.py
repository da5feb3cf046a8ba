"""S3 buckets (AWS and S3-compatible stores): ``s3://bucket/key``."""

from __future__ import annotations

from ferry.backends.s3.backend import S3Backend
from ferry.backends.s3.client import Archived, NoSuchBucket

__all__ = ["Archived", "NoSuchBucket", "S3Backend"]
