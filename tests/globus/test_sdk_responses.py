"""The Globus backend against ``globus_sdk.testing``'s registered responses (the SDK's own recorded
answers where it has them, and ours, shaped like the documented API, where it has none):
stat, paged ls, the delete task followed to its end, and one test per error mapping."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import globus_sdk
import pytest
import responses
from globus_sdk.testing import RegisteredResponse, ResponseSet, construct_error, load_response, register_response_set

from ferry.backends.base import Kind
from ferry.backends.globus import backend as gb
from ferry.backends.globus.errors import map_error
from ferry.backends.globus.settings import GlobusSettings
from ferry.core.address import parse_address
from ferry.core.errors import (
    AlreadyExists,
    AuthError,
    FerryError,
    NotADirectory,
    NotFound,
    PermissionDenied,
    Transient,
)

COLL = "1c6e6bb0-5a57-4a5d-9ab5-6a4d1c3e2f10"
LS = f"/v0.10/operation/endpoint/{COLL}/ls"


def _file(name: str, kind: str = "file", size: int = 3) -> dict[str, Any]:
    return {
        "DATA_TYPE": "file",
        "name": name,
        "type": kind,
        "size": size,
        "last_modified": "2024-05-06 07:08:09+00:00",
        "permissions": "0644",
        "user": "u",
        "group": "g",
        "link_target": None,
    }


def _ls_page(names: list[str], offset: int) -> RegisteredResponse:
    return RegisteredResponse(
        service="transfer",
        path=LS,
        json={"DATA_TYPE": "file_list", "path": "/d/", "endpoint": COLL, "DATA": [_file(n) for n in names]},
        match=[responses.matchers.query_param_matcher({"offset": str(offset)}, strict_match=False)],
    )


register_response_set(
    "ferry-ls-pages",
    ResponseSet(metadata={"collection": COLL}, first=_ls_page(["a", "b"], 0), second=_ls_page(["c"], 2)),
)


def _task(status: str, **extra: Any) -> RegisteredResponse:
    return RegisteredResponse(
        service="transfer",
        path=f"/v0.10/task/{extra.pop('task_id')}",
        json={"DATA_TYPE": "task", "status": status, "nice_status": None, "faults": 0, **extra},
    )


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[gb.GlobusBackend]:
    for var in ("GLOBUS_SDK_SERVICE_URL_TRANSFER", "GLOBUS_SDK_SERVICE_URL_AUTH", "GLOBUS_SDK_ENVIRONMENT"):
        monkeypatch.delenv(var, raising=False)
    responses.start()
    b = gb.GlobusBackend(parse_address(f"globus://{COLL}/"), GlobusSettings(poll=0.01, use_gcp=False))
    b._tc = globus_sdk.TransferClient(authorizer=globus_sdk.AccessTokenAuthorizer("test-token"))
    try:
        yield b
    finally:
        responses.stop()
        responses.reset()


def test_stat_with_the_sdks_recorded_response(backend: gb.GlobusBackend) -> None:
    meta = load_response(globus_sdk.TransferClient.operation_stat).metadata
    backend.collection = meta["endpoint_id"]
    e = backend.stat("/~/file1.txt")
    assert (e.name, e.kind, e.size, e.mode) == ("file1.txt", Kind.FILE, 4, 0o644)
    assert e.mtime is not None and e.mtime.tzinfo is not None and e.mtime.year == 2023


def test_stat_not_found_and_permission_denied_keep_the_service_words(backend: gb.GlobusBackend) -> None:
    meta = load_response(globus_sdk.TransferClient.operation_stat, case="not_found").metadata
    backend.collection = meta["endpoint_id"]
    # stat's "not found" is checked against the parent's listing (servers without stat)
    RegisteredResponse(
        service="transfer",
        path=f"/v0.10/operation/endpoint/{meta['endpoint_id']}/ls",
        json={"DATA_TYPE": "file_list", "DATA": [_file("other")]},
    ).add()
    with pytest.raises(NotFound) as nf:
        backend.stat("/~/foo")
    assert "Path not found" in nf.value.message
    responses.reset()
    load_response(globus_sdk.TransferClient.operation_stat, case="permission_denied")
    with pytest.raises(PermissionDenied) as pd:
        backend.stat("/foo")
    assert "Denied by endpoint" in pd.value.message and "EndpointPermissionDenied" in pd.value.detail


def test_ls_pages_until_a_short_page(backend: gb.GlobusBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gb, "LS_PAGE", 2)  # the service's 100,000 per call, scaled down
    load_response("ferry-ls-pages", case="first")
    load_response("ferry-ls-pages", case="second")
    names = [e.name for e in backend.list("/d")]
    assert names == ["a", "b", "c"]
    urls = [str(c.request.url) for c in responses.calls]
    offsets = [u.split("offset=")[1].split("&")[0] for u in urls]
    assert offsets == ["0", "2"]
    assert all("limit=2" in u and "show_hidden=1" in u for u in urls)


def test_delete_is_a_task_followed_to_its_end(backend: gb.GlobusBackend) -> None:
    from ferry.backends.globus.tasks import run_delete

    load_response(globus_sdk.TransferClient.get_submission_id)
    meta = load_response(globus_sdk.TransferClient.submit_delete).metadata
    task_id = meta["task_id"]
    _task("ACTIVE", task_id=task_id).add()
    _task("SUCCEEDED", task_id=task_id).add()
    done = run_delete(backend, ["/d/old"], recursive=True)
    assert done["status"] == "SUCCEEDED"
    polls = [c for c in responses.calls if str(c.request.url).endswith(f"/task/{task_id}")]
    assert len(polls) == 2
    body = next(c for c in responses.calls if str(c.request.url).endswith("/delete")).request.body
    assert isinstance(body, bytes) and b'"recursive": true' in body and b"/d/old" in body


def test_failed_delete_raises_with_the_fatal_error(backend: gb.GlobusBackend) -> None:
    from ferry.backends.globus.tasks import run_delete

    load_response(globus_sdk.TransferClient.get_submission_id)
    task_id = load_response(globus_sdk.TransferClient.submit_delete).metadata["task_id"]
    _task("FAILED", task_id=task_id, fatal_error={"code": "PERMISSION_DENIED", "description": "no write access"}).add()
    with pytest.raises(FerryError) as err:
        run_delete(backend, ["/d/old"], recursive=False)
    assert "no write access" in err.value.message


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (404, "ClientError.NotFound", NotFound),
        (404, "EndpointNotFound", NotFound),
        (403, "EndpointPermissionDenied", PermissionDenied),
        (403, "PermissionDenied", PermissionDenied),
        (401, "AuthenticationFailed", AuthError),
        (403, "ConsentRequired", AuthError),
        (502, "ExternalError.MkdirFailed.Exists", AlreadyExists),
        (502, "ExternalError.DirListingFailed.NotDirectory", NotADirectory),
        (502, "ExternalError.DirListingFailed.GCDisconnected", Transient),
        (503, "ServiceUnavailable", Transient),
        (429, "RequestLimitExceeded", Transient),
    ],
)
def test_map_error(status: int, code: str, expected: type[FerryError]) -> None:
    body: dict[str, Any] = {"code": code, "message": f"the service says {code}", "request_id": "r1"}
    if code == "ConsentRequired":
        body["required_scopes"] = [f"urn:globus:auth:scope:transfer.api.globus.org:all[*https://x/{COLL}]"]
    exc = construct_error(http_status=status, body=body, error_class=globus_sdk.TransferAPIError)
    mapped = map_error(exc, "doing something")
    assert type(mapped) is expected
    assert f"the service says {code}" in mapped.message
    assert "r1" in mapped.detail


def test_network_error_is_transient() -> None:
    exc = globus_sdk.NetworkError("connection refused", ConnectionError("refused"))
    assert isinstance(map_error(exc, "listing"), Transient)
