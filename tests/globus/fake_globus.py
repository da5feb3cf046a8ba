"""A small local fake of Globus Auth, Transfer, Timers and a collection's HTTPS server.

Shaped like the documented APIs (docs.globus.org/api/transfer, /api/auth, /api/timers) for the
calls Ferry makes, on ``http://127.0.0.1:PORT``, so the real ``ferry`` command and the real
``globus-sdk`` reach it through ``GLOBUS_SDK_SERVICE_URL_AUTH`` / ``_TRANSFER`` / ``_TIMER``.
Nothing here reaches the internet.

State lives in :class:`FakeGlobus` (collections as dicts of path -> bytes or a folder marker,
tasks, tokens, access rules, timers) so tests can arrange situations and look inside:

* tokens are checked on every Transfer call (401 for an unknown or expired one);
* ``consent_collections``: listing those collections answers ``ConsentRequired`` until the
  Transfer token carries the collection's ``data_access`` scope;
* ``task_script``: the statuses the next submitted task goes through, one per ``get_task``
  (``FAILED`` ends it with ``fatal_error``; ``FAULT`` adds a fault event and stays ACTIVE);
* ``offline``: collections whose Globus Connect Personal is disconnected;
* ``fail_next``: (method, path prefix) -> (status, code, message) answered once.

Run it on its own for manual poking: ``python tests/globus/fake_globus.py``.
"""

from __future__ import annotations

import base64
import json
import posixpath
import secrets
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

TRANSFER_RS = "transfer.api.globus.org"
AUTH_RS = "auth.globus.org"
TIMERS_RS = "524230d7-ea86-4a52-8312-86065a9e0417"
DIR = object()  # folder marker in a collection's tree

CLIENT_ID = "11111111-2222-3333-4444-555555555555"
CLIENT_SECRET = "fake-secret-not-real"
USER_ID = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


def _iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S+00:00")


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S+00:00")


@dataclass
class Token:
    rs: str
    scope: str
    expires: float
    refresh: str | None = None


@dataclass
class Task:
    task_id: str
    kind: str  # TRANSFER or DELETE
    doc: dict[str, Any]
    script: list[str]
    polls: int = 0
    status: str = "ACTIVE"
    events: list[dict[str, Any]] = field(default_factory=list)
    successful: list[dict[str, str]] = field(default_factory=list)
    faults: int = 0
    fatal: dict[str, str] | None = None
    bytes: int = 0
    files: int = 0


class FakeGlobus:
    """All the fake services' state; thread-safe through one lock."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.collections: dict[str, dict[str, Any]] = {}
        self.endpoints: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, Token] = {}
        self.refresh_tokens: dict[str, Token] = {}
        self.tasks: dict[str, Task] = {}
        self.submissions: dict[str, str] = {}  # submission_id -> task_id
        self.submission_ids_issued: list[str] = []
        self.task_script: list[str] = ["ACTIVE", "SUCCEEDED"]
        self.consent_collections: set[str] = set()
        self.offline: set[str] = set()
        self.fail_next: dict[tuple[str, str], tuple[int, str, str]] = {}
        self.acl: dict[str, dict[str, dict[str, Any]]] = {}
        self.timers: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.submitted: list[dict[str, Any]] = []
        self.token_lifetime = 3600
        self.ls_page_limit = 100_000
        self.auth_codes: dict[str, list[str]] = {}
        self.base_url = ""
        self.consent_refusals = 0
        self.mtimes: dict[tuple[str, str], float] = {}  # written or created while running
        self.has_stat = True  # False: an older Transfer API without operation/stat
        self.extra_names: dict[tuple[str, str], list[str]] = {}  # (collection, folder) -> odd names listed

    # ---- arranging ----
    def add_collection(self, cid: str | None = None, name: str = "Test collection", **doc: Any) -> str:
        cid = cid or str(uuid.uuid4())
        with self.lock:
            self.collections[cid] = {"/": DIR}
            self.endpoints[cid] = {
                "DATA_TYPE": "endpoint",
                "id": cid,
                "display_name": name,
                "owner_string": "someone@example.org",
                "entity_type": doc.pop("entity_type", "GCSv5_mapped_collection"),
                "gcs_version": "5.4.70",
                "https_server": None,
                "force_encryption": False,
                "gcp_connected": None,
                "is_globus_connect": False,
                "description": "",
                **doc,
            }
        return cid

    def enable_https(self, cid: str) -> str:
        url = f"{self.base_url}/https/{cid}"
        with self.lock:
            self.endpoints[cid]["https_server"] = url
        return url

    def put(self, cid: str, path: str, data: bytes | None = None) -> None:
        """Create a file (bytes) or folder (None), with its parents."""
        with self.lock:
            tree = self.collections[cid]
            parts = path.strip("/").split("/")
            for i in range(1, len(parts)):
                tree["/" + "/".join(parts[:i])] = DIR
            tree["/" + "/".join(parts)] = DIR if data is None else data
            self.mtimes[(cid, "/" + "/".join(parts))] = time.time()

    def get(self, cid: str, path: str) -> Any:
        return self.collections[cid].get("/" + path.strip("/") if path.strip("/") else "/")

    def issue_token(self, rs: str, scope: str, lifetime: float | None = None, refresh: bool = False) -> dict[str, Any]:
        tok = "tok-" + secrets.token_hex(8)
        ref = "ref-" + secrets.token_hex(8) if refresh else None
        t = Token(rs, scope, time.time() + (self.token_lifetime if lifetime is None else lifetime), ref)
        with self.lock:
            self.tokens[tok] = t
            if ref:
                self.refresh_tokens[ref] = t
        out = {
            "access_token": tok,
            "expires_in": int(self.token_lifetime if lifetime is None else lifetime),
            "resource_server": rs,
            "scope": scope,
            "token_type": "Bearer",
        }
        if ref:
            out["refresh_token"] = ref
        return out

    # ---- helpers used by the handler ----
    def token_ok(self, header: str | None, rs: str) -> Token | None:
        if not header or not header.startswith("Bearer "):
            return None
        t = self.tokens.get(header[7:])
        if t is None or t.rs != rs or t.expires < time.time():
            return None
        return t

    def node(self, cid: str, path: str) -> tuple[str, Any]:
        clean = path.replace("/~/", "/").lstrip("~").lstrip("/") if path else ""
        norm = posixpath.normpath("/" + clean) if clean else "/"
        return norm, self.collections[cid].get(norm)

    def doc_for(self, cid: str, path: str, value: Any) -> dict[str, Any]:
        name = posixpath.basename(path.rstrip("/"))
        is_dir = value is DIR
        return {
            "DATA_TYPE": "file",
            "name": name,
            "type": "dir" if is_dir else "file",
            "size": 4096 if is_dir else len(value),
            "last_modified": _iso(self.mtimes.get((cid, path))) or "2026-01-02 03:04:05+00:00",
            "permissions": "0755" if is_dir else "0644",
            "user": "researcher",
            "group": "lab",
            "link_target": None,
        }

    def children(self, cid: str, folder: str) -> list[tuple[str, Any]]:
        prefix = folder.rstrip("/") + "/"
        out = []
        for p, v in self.collections[cid].items():
            if p != "/" and p.startswith(prefix if prefix != "//" else "/"):
                rest = p[len(prefix) :] if prefix != "//" else p[1:]
                if rest and "/" not in rest:
                    out.append((p, v))
        return sorted(out)

    def run_transfer(self, task: Task) -> None:
        """Do the copy the task describes (on success), recording each file moved."""
        doc = task.doc
        src, dst = doc["source_endpoint"], doc["destination_endpoint"]
        sync = doc.get("sync_level")
        for item in doc.get("DATA", []):
            s_norm, s_val = self.node(src, item["source_path"])
            d_norm = posixpath.normpath(item["destination_path"])
            if s_val is None:
                continue
            pairs: list[tuple[str, str, Any]] = []
            if s_val is DIR:
                for p, v in sorted(self.collections[src].items()):
                    if p == s_norm or p.startswith(s_norm.rstrip("/") + "/"):
                        rel = p[len(s_norm) :].lstrip("/")
                        pairs.append((p, posixpath.join(d_norm, rel) if rel else d_norm, v))
            else:
                pairs.append((s_norm, d_norm, s_val))
            for sp, dp, v in pairs:
                if v is DIR:
                    self.put(dst, dp, None)
                    continue
                existing = self.collections[dst].get(dp)
                if existing is not None and sync is not None and self._in_sync(sync, (src, sp), (dst, dp), v, existing):
                    task.doc.setdefault("_skipped", 0)
                    task.doc["_skipped"] += 1
                    continue
                self.put(dst, dp, bytes(v))
                task.successful.append({"DATA_TYPE": "successful_transfer", "source_path": sp, "destination_path": dp})
                task.bytes += len(v)
                task.files += 1

    def _in_sync(self, level: int, s: tuple[str, str], d: tuple[str, str], sv: Any, dv: Any) -> bool:
        """The service's sync levels: 0 exists, 1 same size, 2 same size and the source not
        newer, 3 same checksum (here: same bytes)."""
        if level == 0:
            return True
        if level == 3:
            return bool(dv == sv)
        if dv is DIR or len(dv) != len(sv):
            return False
        return level == 1 or self.mtimes.get(s, 0.0) <= self.mtimes.get(d, 0.0)

    def task_doc(self, task: Task) -> dict[str, Any]:
        d = task.doc
        return {
            "DATA_TYPE": "task",
            "task_id": task.task_id,
            "type": task.kind,
            "status": task.status,
            "nice_status": {"ACTIVE": "Queued" if task.polls <= 1 else "OK", "INACTIVE": "PAUSED_BY_ADMIN"}.get(
                task.status
            ),
            "label": d.get("label"),
            "source_endpoint_id": d.get("source_endpoint") or d.get("endpoint"),
            "destination_endpoint_id": d.get("destination_endpoint"),
            "bytes_transferred": task.bytes if task.status == "SUCCEEDED" else task.bytes // 2,
            "files": task.files if task.status == "SUCCEEDED" else 0,
            "files_transferred": task.files if task.status == "SUCCEEDED" else 0,
            "files_skipped": d.get("_skipped", 0) if task.status == "SUCCEEDED" else 0,
            "subtasks_total": 1,
            "faults": task.faults,
            "effective_bytes_per_second": 1000,
            "fatal_error": task.fatal,
            "verify_checksum": d.get("verify_checksum"),
            "sync_level": d.get("sync_level"),
            "encrypt_data": d.get("encrypt_data"),
            "deadline": d.get("deadline"),
            "is_ok": task.status != "FAILED",
            "request_time": _now_iso(),
            "completion_time": _now_iso() if task.status in ("SUCCEEDED", "FAILED") else None,
        }

    def advance(self, task: Task) -> None:
        if task.status in ("SUCCEEDED", "FAILED"):
            return
        task.polls += 1
        step = task.script[min(task.polls - 1, len(task.script) - 1)]
        if step == "FAULT":
            task.faults += 1
            task.events.append(
                {
                    "DATA_TYPE": "event",
                    "code": "PERMISSION_DENIED",
                    "is_error": True,
                    "description": "permission denied",
                    "details": "Error (transfer): Permission denied on /restricted/file.bin",
                    "time": _now_iso(),
                }
            )
            task.status = "ACTIVE"
        elif step == "FAILED":
            task.status = "FAILED"
            task.fatal = {"code": "PERMISSION_DENIED", "description": "permission denied on the destination"}
            task.events.append(
                {
                    "DATA_TYPE": "event",
                    "code": "PERMISSION_DENIED",
                    "is_error": True,
                    "description": "permission denied",
                    "details": "Error: Permission denied writing /dest",
                    "time": _now_iso(),
                }
            )
        elif step == "SUCCEEDED":
            if task.kind == "TRANSFER":
                self.run_transfer(task)
            else:
                self.run_delete(task)
            task.status = "SUCCEEDED"
        else:
            task.status = step

    def run_delete(self, task: Task) -> None:
        cid = task.doc["endpoint"]
        for item in task.doc.get("DATA", []):
            norm, _ = self.node(cid, item["path"])
            for p in [p for p in self.collections[cid] if p == norm or p.startswith(norm.rstrip("/") + "/")]:
                del self.collections[cid][p]


def _scope_rs(scope: str) -> str:
    base = scope.split("[", 1)[0]
    if base.startswith("urn:globus:auth:scope:transfer.api.globus.org"):
        return TRANSFER_RS
    if base in ("openid", "profile", "email") or "auth.globus.org:" in base:
        return AUTH_RS
    if base.startswith("https://auth.globus.org/scopes/"):
        return base.split("/")[4]
    return base


def _split_scopes(text: str) -> list[str]:
    """Split a scope string on spaces outside brackets."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == " " and depth == 0:
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        out.append(cur)
    return out


def _token_response(fake: FakeGlobus, scopes: list[str], refresh: bool) -> dict[str, Any]:
    by_rs: dict[str, list[str]] = {}
    for s in scopes:
        by_rs.setdefault(_scope_rs(s), []).append(s)
    toks = [fake.issue_token(rs, " ".join(ss), refresh=refresh) for rs, ss in by_rs.items()]
    if not toks:
        toks = [fake.issue_token(AUTH_RS, "openid", refresh=refresh)]
    first = toks[0]
    return {**first, "other_tokens": toks[1:]}


class Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        # Headers and body go out as separate writes: without this, Nagle plus delayed ACK
        # stalls every keep-alive request ~40 ms on loopback.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # ---- plumbing ----
    @property
    def fake(self) -> FakeGlobus:
        return self.server.fake

    def _body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            return self.rfile.read(n)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        return b""

    def _json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, code: str, message: str, **extra: Any) -> None:
        self._json(
            status,
            {
                "code": code,
                "message": message,
                "request_id": "fake" + secrets.token_hex(3),
                "resource": self.path,
                **extra,
            },
        )

    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        q = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        body = self._body() if method in ("POST", "PUT", "PATCH") else b""
        with self.fake.lock:
            self.fake.requests.append((method, path))
            for (m, prefix), answer in list(self.fake.fail_next.items()):
                if m == method and path.startswith(prefix):
                    del self.fake.fail_next[(m, prefix)]
                    self._error(*answer)
                    return
            try:
                if path.startswith("/v2/oauth2/") or path.startswith("/v2/api/"):
                    self._auth(method, path, q, body)
                elif path.startswith("/v0.10/"):
                    self._transfer(method, path[len("/v0.10") :], q, body)
                elif path.startswith("/https/"):
                    self._https(method, path[len("/https/") :], body)
                elif path.startswith("/v2/timer") or path.startswith("/jobs"):
                    self._timers(method, path, q, body)
                else:
                    self._error(404, "NotFound", f"no route {path}")
            except BrokenPipeError:
                pass

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def do_PATCH(self) -> None:
        self._route("PATCH")

    # ---- Auth ----
    def _auth(self, method: str, path: str, q: dict[str, str], body: bytes) -> None:
        fake = self.fake
        form = {k: v[-1] for k, v in parse_qs(body.decode()).items()}
        if path == "/v2/oauth2/token" and method == "POST":
            grant = form.get("grant_type")
            if grant == "client_credentials":
                auth = self.headers.get("Authorization", "")
                expected = "Basic " + base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
                if auth != expected:
                    self._json(401, {"error": "invalid_client", "error_description": "bad client credentials"})
                    return
                self._json(200, _token_response(fake, _split_scopes(form.get("scope", "")), refresh=False))
                return
            if grant == "refresh_token":
                old = fake.refresh_tokens.get(form.get("refresh_token", ""))
                if old is None:
                    self._json(401, {"error": "invalid_grant"})
                    return
                tok = fake.issue_token(old.rs, old.scope)
                tok["refresh_token"] = form["refresh_token"]
                self._json(200, {**tok, "other_tokens": []})
                return
            if grant == "authorization_code":
                scopes = fake.auth_codes.pop(form.get("code", ""), None)
                if scopes is None:
                    self._json(401, {"error": "invalid_grant", "error_description": "unknown code"})
                    return
                self._json(200, _token_response(fake, scopes, refresh=True))
                return
            self._json(400, {"error": "unsupported_grant_type"})
            return
        if path == "/v2/oauth2/authorize" and method == "GET":
            # The person logs in and consents at once: back to the app's redirect with a code for
            # exactly the scopes asked for (what Globus Auth does after the login page).
            code = "code-" + secrets.token_hex(6)
            fake.auth_codes[code] = _split_scopes(q.get("scope", ""))
            sep = "&" if "?" in q["redirect_uri"] else "?"
            self.send_response(302)
            self.send_header("Location", f"{q['redirect_uri']}{sep}code={code}&state={q.get('state', '')}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path == "/v2/oauth2/token/revoke":
            revoked = form.get("token", "")
            fake.tokens.pop(revoked, None)
            fake.refresh_tokens.pop(revoked, None)
            self._json(200, {"active": False})
            return
        if path == "/v2/oauth2/userinfo":
            if fake.token_ok(self.headers.get("Authorization"), AUTH_RS) is None:
                self._error(401, "UNAUTHORIZED", "token invalid")
                return
            self._json(
                200,
                {
                    "sub": USER_ID,
                    "preferred_username": "researcher@example.org",
                    "name": "A Researcher",
                    "email": "researcher@example.org",
                    "identity_set": [],
                },
            )
            return
        if path == "/v2/api/identities":
            names = [n for n in q.get("usernames", "").split(",") if n]
            ids = [
                {
                    "id": str(uuid.uuid5(uuid.NAMESPACE_DNS, n)),
                    "username": n,
                    "status": "used",
                    "name": n.split("@")[0],
                    "email": n,
                }
                for n in names
            ]
            self._json(200, {"identities": ids})
            return
        self._error(404, "NotFound", path)

    # ---- Transfer ----
    def _transfer(self, method: str, path: str, q: dict[str, str], body: bytes) -> None:
        fake = self.fake
        tok = fake.token_ok(self.headers.get("Authorization"), TRANSFER_RS)
        if tok is None:
            self._error(401, "AuthenticationFailed", "Token is not active")
            return
        parts = path.strip("/").split("/")
        data = json.loads(body) if body else {}
        if parts[0] == "submission_id":
            sid = str(uuid.uuid4())
            fake.submission_ids_issued.append(sid)
            self._json(200, {"DATA_TYPE": "submission_id", "value": sid})
            return
        if parts[0] == "endpoint_search":
            text = q.get("filter_fulltext", "").lower()
            scope = q.get("filter_scope", "all")
            hits = [
                e
                for e in fake.endpoints.values()
                if (not text or text in e["display_name"].lower())
                and (scope != "my-endpoints" or e.get("owner_string") == "researcher@example.org")
            ]
            self._json(
                200, {"DATA_TYPE": "endpoint_list", "DATA": hits, "has_next_page": False, "offset": 0, "limit": 100}
            )
            return
        if parts[0] == "endpoint" and len(parts) >= 2:
            cid = parts[1]
            if cid not in fake.endpoints:
                self._error(404, "EndpointNotFound", f"No such collection '{cid}'")
                return
            if len(parts) == 2:
                self._json(200, fake.endpoints[cid])
                return
            if parts[2] == "access" and method == "POST":
                rid = str(uuid.uuid4())
                fake.acl.setdefault(cid, {})[rid] = {**data, "id": rid, "DATA_TYPE": "access"}
                self._json(
                    201,
                    {
                        "DATA_TYPE": "access_create_result",
                        "code": "Created",
                        "access_id": rid,
                        "message": "Access rule created successfully.",
                        "resource": self.path,
                    },
                )
                return
            if parts[2] == "access" and method == "DELETE":
                if fake.acl.get(cid, {}).pop(parts[3], None) is None:
                    self._error(404, "AccessRuleNotFound", "no such rule")
                    return
                self._json(200, {"DATA_TYPE": "result", "code": "Deleted", "message": "Access rule deleted"})
                return
            if parts[2] == "access_list":
                self._json(200, {"DATA_TYPE": "access_list", "DATA": list(fake.acl.get(cid, {}).values())})
                return
            self._error(404, "NotFound", path)
            return
        if parts[0] == "operation" and len(parts) >= 4:
            self._operation(parts[2], parts[3], method, q, data, tok)
            return
        if parts[0] in ("transfer", "delete") and method == "POST":
            sid = str(data.get("submission_id"))
            if sid in fake.submissions:
                self._json(
                    200,
                    {
                        "DATA_TYPE": f"{parts[0]}_result",
                        "code": "Duplicate",
                        "task_id": fake.submissions[sid],
                        "submission_id": sid,
                        "message": "A transfer with identical submission_id was already submitted",
                    },
                )
                return
            for key in ("source_endpoint", "destination_endpoint", "endpoint"):
                if key in data and data[key] not in fake.endpoints:
                    self._error(404, "EndpointNotFound", f"No such collection '{data[key]}'")
                    return
            tid = str(uuid.uuid4())
            kind = "TRANSFER" if parts[0] == "transfer" else "DELETE"
            script = list(fake.task_script) if kind == "TRANSFER" else ["SUCCEEDED"]
            fake.tasks[tid] = Task(tid, kind, data, script)
            fake.submissions[sid] = tid
            fake.submitted.append(data)
            self._json(
                202,
                {
                    "DATA_TYPE": f"{parts[0]}_result",
                    "code": "Accepted",
                    "task_id": tid,
                    "submission_id": sid,
                    "message": "The transfer has been accepted and a task has been created and queued for execution",
                    "request_id": "fake",
                },
            )
            return
        if parts[0] == "task" and len(parts) >= 2:
            task = fake.tasks.get(parts[1])
            if task is None:
                self._error(404, "TaskNotFound", f"Task {parts[1]} not found")
                return
            sub = parts[2] if len(parts) > 2 else ""
            if sub == "" and method == "GET":
                fake.advance(task)
                self._json(200, fake.task_doc(task))
            elif sub == "cancel":
                if task.status in ("SUCCEEDED", "FAILED"):
                    self._json(200, {"DATA_TYPE": "result", "code": "TaskComplete", "message": "Task already complete"})
                    return
                task.status = "FAILED"
                task.fatal = {"code": "CANCELED", "description": "canceled"}
                self._json(200, {"DATA_TYPE": "result", "code": "Canceled", "message": "The task has been cancelled."})
            elif sub == "event_list":
                evs = list(reversed(task.events))
                if q.get("filter") == "is_error:1":
                    evs = [e for e in evs if e["is_error"]]
                lim = int(q.get("limit", 10))
                self._json(
                    200, {"DATA_TYPE": "event_list", "DATA": evs[:lim], "limit": lim, "offset": 0, "total": len(evs)}
                )
            elif sub == "successful_transfers":
                marker = int(q.get("marker") or 0)
                page = task.successful[marker : marker + 2]  # tiny pages: the client's paging is exercised
                nxt = marker + 2 if marker + 2 < len(task.successful) else None
                self._json(
                    200, {"DATA_TYPE": "successful_transfers", "marker": marker, "next_marker": nxt, "DATA": page}
                )
            else:
                self._error(404, "NotFound", path)
            return
        self._error(404, "NotFound", f"no route {path}")

    def _operation(self, cid: str, op: str, method: str, q: dict[str, str], data: dict[str, Any], tok: Token) -> None:
        fake = self.fake
        if cid not in fake.collections:
            self._error(404, "EndpointNotFound", f"No such collection '{cid}'")
            return
        if cid in fake.offline:
            self._error(
                502,
                "ExternalError.DirListingFailed.GCDisconnected",
                f"The Globus Connect Personal endpoint '{cid}' is not currently connected to Globus",
            )
            return
        if cid in fake.consent_collections and f"{cid}/data_access" not in tok.scope:
            fake.consent_refusals += 1
            scope = (
                f"urn:globus:auth:scope:transfer.api.globus.org:all[*https://auth.globus.org/scopes/{cid}/data_access]"
            )
            self._error(
                403,
                "ConsentRequired",
                "Missing required data_access consent",
                required_scopes=[scope],
                authorization_parameters={"required_scopes": [scope], "session_message": "consent"},
            )
            return
        if op == "ls":
            norm, node = fake.node(cid, q.get("path", "/"))
            if node is None:
                self._error(404, "ClientError.NotFound", f"Directory '{norm}' not found on endpoint {cid}")
                return
            if node is not DIR:
                self._error(502, "ExternalError.DirListingFailed.NotDirectory", f"'{norm}' is not a directory")
                return
            kids = fake.children(cid, norm)
            limit = min(int(q.get("limit") or 100_000), fake.ls_page_limit)
            offset = int(q.get("offset") or 0)
            page = kids[offset : offset + limit]
            self._json(
                200,
                {
                    "DATA_TYPE": "file_list",
                    "path": norm + ("/" if norm != "/" else ""),
                    "absolute_path": norm,
                    "endpoint": cid,
                    "rename_supported": True,
                    "symlink_supported": False,
                    "length": len(page),
                    "total": len(kids),
                    "DATA": [fake.doc_for(cid, p, v) for p, v in page]
                    + [{**fake.doc_for(cid, "x", b"odd"), "name": n} for n in fake.extra_names.get((cid, norm), [])],
                },
            )
            return
        if op == "stat" and not fake.has_stat:
            self._error(404, "NotFound", f"no route {op}")
            return
        if op == "stat":
            norm, node = fake.node(cid, q.get("path", "/"))
            if node is None:
                self._error(404, "NotFound", f"Path not found: {norm}")
                return
            self._json(200, fake.doc_for(cid, norm, node))
            return
        if op == "mkdir":
            norm, node = fake.node(cid, data["path"])
            if node is not None:
                self._error(502, "ExternalError.MkdirFailed.Exists", f"Path already exists, Error Path '{norm}'")
                return
            parent = posixpath.dirname(norm)
            if fake.collections[cid].get(parent) is not DIR:
                self._error(502, "ExternalError.MkdirFailed.NotFound", f"Parent of '{norm}' not found")
                return
            fake.collections[cid][norm] = DIR
            fake.mtimes[(cid, norm)] = time.time()
            self._json(
                202,
                {
                    "DATA_TYPE": "mkdir_result",
                    "code": "DirectoryCreated",
                    "message": "The directory was created successfully",
                },
            )
            return
        if op == "rename":
            old, node = fake.node(cid, data["old_path"])
            new, _unused = fake.node(cid, data["new_path"])
            if node is None:
                self._error(404, "ClientError.NotFound", f"'{old}' not found")
                return
            tree = fake.collections[cid]
            for p in sorted([p for p in tree if p == old or p.startswith(old + "/")]):
                tree[new + p[len(old) :]] = tree.pop(p)
                fake.mtimes[(cid, new + p[len(old) :])] = fake.mtimes.pop((cid, p), time.time())
            self._json(
                200, {"DATA_TYPE": "result", "code": "FileRenamed", "message": "File or directory renamed successfully"}
            )
            return
        self._error(404, "NotFound", op)

    # ---- a collection's HTTPS server ----
    def _https(self, method: str, rest: str, body: bytes) -> None:
        fake = self.fake
        cid, _, path = rest.partition("/")
        tok = fake.token_ok(self.headers.get("Authorization"), cid)
        if tok is None:
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        norm, node = fake.node(cid, "/" + path)
        if method == "GET":
            if node is None or node is DIR:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = bytes(node)
            status = 200
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes="):
                a, _, b = rng[6:].partition("-")
                start, end = int(a), int(b) if b else len(data) - 1
                data = data[start : end + 1]
                status = 206
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if method == "PUT":
            if fake.collections[cid].get(posixpath.dirname(norm)) is not DIR:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            fake.collections[cid][norm] = body
            fake.mtimes[(cid, norm)] = time.time()
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if method == "DELETE":
            fake.collections[cid].pop(norm, None)
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return

    # ---- Timers ----
    def _timers(self, method: str, path: str, q: dict[str, str], body: bytes) -> None:
        fake = self.fake
        if fake.token_ok(self.headers.get("Authorization"), TIMERS_RS) is None:
            self._error(401, "AUTHENTICATION_ERROR", "token invalid")
            return
        data = json.loads(body) if body else {}
        if path == "/v2/timer" and method == "POST":
            timer = data["timer"]
            jid = str(uuid.uuid4())
            job = {
                "job_id": jid,
                "name": timer.get("name"),
                "schedule": timer["schedule"],
                "status": "new",
                "timer_type": timer.get("timer_type"),
                "body": timer.get("body"),
                "next_run": timer["schedule"].get("start") or timer["schedule"].get("datetime"),
                "inactive_reason": None,
            }
            fake.timers[jid] = job
            self._json(201, {"timer": job})
            return
        if path.rstrip("/") == "/jobs" and method == "GET":
            self._json(200, {"jobs": list(fake.timers.values())})
            return
        if path.startswith("/jobs/") and method == "DELETE":
            jid = path.split("/")[2]
            gone = fake.timers.pop(jid, None)
            if gone is None:
                self._error(404, "NOT_FOUND", f"Timer {jid} not found")
                return
            self._json(200, {**gone, "status": "deleted"})
            return
        self._error(404, "NOT_FOUND", path)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeGlobus


class FakeGlobusServer:
    """Start the fake on 127.0.0.1 (a free port) in a thread; ``env`` points the SDK at it."""

    def __init__(self, fake: FakeGlobus | None = None) -> None:
        self.fake = fake or FakeGlobus()
        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.httpd.fake = self.fake
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.fake.base_url = self.url
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="fake-globus", daemon=True)

    def start(self) -> FakeGlobusServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)

    def env(self, *, client: bool = True) -> dict[str, str]:
        env = {
            "GLOBUS_SDK_SERVICE_URL_AUTH": self.url + "/",
            "GLOBUS_SDK_SERVICE_URL_TRANSFER": self.url + "/",
            "GLOBUS_SDK_SERVICE_URL_TIMER": self.url + "/",
            "FERRY_GLOBUS_POLL": "0.02",
        }
        if client:
            env["GLOBUS_CLIENT_ID"] = CLIENT_ID
            env["GLOBUS_CLIENT_SECRET"] = CLIENT_SECRET
        return env

    def __enter__(self) -> FakeGlobusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":  # pragma: no cover - manual use
    srv = FakeGlobusServer().start()
    a = srv.fake.add_collection(name="Synchrotron")
    srv.fake.put(a, "/data/run1/a.h5", b"x" * 1000)
    print("fake Globus at", srv.url, "collection", a)
    for k, v in srv.env().items():
        print(f"export {k}={v}")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()
