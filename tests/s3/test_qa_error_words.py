"""QA of issues 22/23 from the command line: an S3 error names what Ferry was doing in words
that read. ``what`` is sometimes an activity ("listing s3://b/p") and sometimes only the object
(``ferry sync src s3://b/x`` said "Cannot reach the S3 service while s3://b/x: ..."), so the
message puts it in parentheses, where both read."""

from __future__ import annotations

import botocore.exceptions as bx

from ferry.backends.s3.errors import map_error


def test_an_unreachable_endpoint_names_the_object_in_words_that_read() -> None:
    err = map_error(bx.EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), "s3://bkt/x")
    assert str(err).startswith("Cannot reach the S3 service (s3://bkt/x): is the endpoint right and up?"), str(err)


def test_a_read_timeout_names_the_object_in_words_that_read() -> None:
    exc = bx.ReadTimeoutError(endpoint_url="http://127.0.0.1:1")
    err = map_error(exc, "s3://bkt/x", read_timeout=5)
    assert "while s3://" not in str(err) and "within 5 s (s3://bkt/x)" in str(err), str(err)
