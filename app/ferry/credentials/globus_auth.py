"""Globus login: tokens for the Transfer, Timers and Auth services (and a collection's HTTPS server).

Two ways in, chosen by the environment, as Globus's own CLI does:

* ``GLOBUS_CLIENT_ID`` and ``GLOBUS_CLIENT_SECRET`` set: a *confidential client* (a service
  account for servers and overnight runners). Tokens come from the client-credentials grant
  whenever they are needed; nothing is stored and no person is asked anything.
* otherwise a *native app* login for a person: the browser-based flow with refresh tokens on.
  Where a browser can be opened on this machine the redirect goes to a short-lived local server;
  over SSH or without a display the person pastes the code back (asked through Ferry's prompter,
  so the GUI can ask in a dialog). ``ferry globus login`` runs it; nothing logs in by surprise
  except to ask consent (below).

Tokens are kept through the SDK's :class:`~globus_sdk.token_storage.TokenStorage` interface:
in the OS keychain, one small entry per resource server (keychains dislike big blobs), or — only
where there is no keychain — in a JSON file readable by the owner alone, with a notice saying so.

Every client is an SDK client, so ``GLOBUS_SDK_ENVIRONMENT`` and ``GLOBUS_SDK_SERVICE_URL_*``
are honoured (that is also how the tests point Ferry at a local fake of the services).

Consent: a mapped GCSv5 collection needs a ``data_access`` scope under the Transfer scope. When
the service answers ``ConsentRequired``, :meth:`GlobusAuth.consent` asks the person (re-running
the login with the required scopes) — or, for a confidential client, asks Auth for a token with
those scopes — and remembers the scopes so later logins include them; the caller then retries.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferry.core.dirs import config_dir, ensure_private_dir
from ferry.core.errors import Action, AuthError, Transient, UsageError

if TYPE_CHECKING:
    import globus_sdk
    from globus_sdk.authorizers import GlobusAuthorizer
    from globus_sdk.token_storage import TokenStorage, TokenStorageData

log = logging.getLogger(__name__)

# PLACEHOLDER, not a registered id: Ferry has not yet been registered as a native app at
# app.globus.org (it cannot be done from the development machines, which have no internet).
# Until it is, personal login against the real service needs an app id of the person's or site's
# own (a one-time registration, see APP_ID_STEPS): FERRY_GLOBUS_NATIVE_CLIENT_ID, or the id saved
# by the window or save_app_id in globus.json. GLOBUS_CLIENT_ID/SECRET need neither.
NATIVE_CLIENT_ID = "7d1c6f52-2f0e-4e84-9b3c-5a3c1e0f0f3a"
APP_ID_KEY = "native_client_id"  # in globus.json (config folder): an id is not a secret

REGISTRATION_URL = "https://app.globus.org/settings/developers"
APP_ID_STEPS = (
    "This copy of Ferry has no Globus app id of its own yet, so Globus would refuse the login. "
    "Registering one takes a minute and is done once:",
    f"1. Open {REGISTRATION_URL} and log in with your institution's account.",
    '2. Choose "Register a thick client or script that will be installed and run by users on their '
    'devices"; create or pick a project; name the app "Ferry"; leave the redirect as it is; Register.',
    '3. Copy the app\'s "Client UUID" (it looks like 1b0dc9d3-0a2b-4000-8bdc-2c2fb9f7b4e1) and paste it '
    "below. Ferry keeps it in its settings (it is not a secret).",
)

TRANSFER_RS = "transfer.api.globus.org"
AUTH_RS = "auth.globus.org"
TIMERS_RS = "524230d7-ea86-4a52-8312-86065a9e0417"
TRANSFER_SCOPE = "urn:globus:auth:scope:transfer.api.globus.org:all"
TIMERS_SCOPE = f"https://auth.globus.org/scopes/{TIMERS_RS}/timer"
AUTH_SCOPES = ("openid", "profile", "email", "urn:globus:auth:scope:auth.globus.org:view_identities")


def data_access_scope(collection: str) -> str:
    return f"https://auth.globus.org/scopes/{collection}/data_access"


def https_scope(collection: str) -> str:
    return f"https://auth.globus.org/scopes/{collection}/https"


def transfer_scope_with(collections: Iterable[str]) -> str:
    deps = " ".join(f"*{data_access_scope(c)}" for c in sorted(set(collections)))
    return f"{TRANSFER_SCOPE}[{deps}]" if deps else TRANSFER_SCOPE


def environment() -> str:
    return os.environ.get("GLOBUS_SDK_ENVIRONMENT", "production")


# ---------------------------------------------------------------- token storage


def _keychain_storage_class() -> type[TokenStorage]:
    from globus_sdk.token_storage import TokenStorage, TokenStorageData

    from ferry.credentials import keychain

    class _KeychainTokenStorage(TokenStorage):
        """One keychain entry per resource server plus an index (keychains dislike big blobs).
        Defined at first use so importing this module does not import the SDK."""

        def __init__(self, namespace: str) -> None:
            super().__init__(namespace=namespace)
            self._prefix = f"globus:{environment()}:{namespace}"

        def _index(self) -> list[str]:
            raw = keychain.get_secret(f"{self._prefix}:index")
            return list(json.loads(raw)) if raw else []

        def store_token_data_by_resource_server(self, token_data_by_resource_server: Mapping[str, Any]) -> None:
            index = self._index()
            for rs, data in token_data_by_resource_server.items():
                keychain.set_secret(f"{self._prefix}:{rs}", json.dumps(data.to_dict()))
                if rs not in index:
                    index.append(rs)
            keychain.set_secret(f"{self._prefix}:index", json.dumps(index))

        def get_token_data_by_resource_server(self) -> dict[str, TokenStorageData]:
            out: dict[str, TokenStorageData] = {}
            for rs in self._index():
                raw = keychain.get_secret(f"{self._prefix}:{rs}")
                if raw:
                    out[rs] = TokenStorageData.from_dict(json.loads(raw))
            return out

        def remove_token_data(self, resource_server: str) -> bool:
            removed = keychain.delete_secret(f"{self._prefix}:{resource_server}")
            index = [rs for rs in self._index() if rs != resource_server]
            if index:
                keychain.set_secret(f"{self._prefix}:index", json.dumps(index))
            else:
                keychain.delete_secret(f"{self._prefix}:index")
            return removed

        def _extract_identity_id(self, token_response: Any) -> str | None:
            # The identity comes from userinfo when asked (whoami); decoding the id_token here
            # would fetch signing keys on every login and refresh for nothing we store.
            return None

    return _KeychainTokenStorage


def token_file() -> Path:
    return config_dir() / "globus-tokens.json"


def make_token_storage(namespace: str) -> tuple[TokenStorage, str]:
    """The storage for a person's tokens, and a sentence saying where they are kept."""
    from ferry.credentials import keychain

    if keychain.keychain_available():
        return _keychain_storage_class()(namespace), f"Globus tokens are kept in {_where_keychain()}."
    from globus_sdk.token_storage import JSONTokenStorage

    path = token_file()
    ensure_private_dir(path.parent)
    if path.exists():
        os.chmod(path, 0o600)  # the SDK writes it owner-only; repair a copy that was loosened

    class _PrivateJSONTokenStorage(JSONTokenStorage):
        def store_token_data_by_resource_server(self, token_data_by_resource_server: Mapping[str, Any]) -> None:
            super().store_token_data_by_resource_server(token_data_by_resource_server)
            os.chmod(self.filepath, 0o600)  # the SDK writes owner-only; make sure of it

        def _extract_identity_id(self, token_response: Any) -> str | None:
            return None

    notice = (
        f"{keychain.keychain_reason()}; Globus tokens are kept in {path}, readable only by you "
        "(anyone with your account can use them: 'ferry globus logout' removes them)."
    )
    return _PrivateJSONTokenStorage(path, namespace=namespace), notice


def _where_keychain() -> str:
    from ferry.credentials import keychain

    reason = keychain.keychain_reason()
    return reason[len("Using ") :] if reason.startswith("Using ") else "the system keychain"


# ---------------------------------------------------------------- consented scopes (not secret)


def _scopes_file() -> Path:
    return config_dir() / "globus.json"


def _load_prefs() -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(_scopes_file().read_text(encoding="utf-8"))
        return data
    except (FileNotFoundError, ValueError):
        return {}


def _save_prefs(data: dict[str, Any]) -> None:
    path = _scopes_file()
    ensure_private_dir(path.parent)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------- the login itself


def _browser_possible() -> bool:
    """A browser on this machine can reach a local redirect server (not over SSH, not headless)."""
    if os.environ.get("SSH_CONNECTION") or os.environ.get("SSH_TTY"):
        return False
    if os.environ.get("FERRY_GLOBUS_NO_BROWSER"):
        return False
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


class _DynamicAuthorizer:
    """Hands an SDK client whatever token the login manager holds *now* for one resource server,
    so a client built before a consent or re-login keeps working after it."""

    def __init__(self, auth: GlobusAuth, resource_server: str) -> None:
        self._auth = auth
        self._rs = resource_server

    def get_authorization_header(self) -> str | None:
        return self._auth.authorizer(self._rs).get_authorization_header()

    def handle_missing_authorization(self) -> bool:
        return bool(self._auth.authorizer(self._rs).handle_missing_authorization())


class GlobusAuth:
    """Tokens for one process: who is logged in and how, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.client_id = os.environ.get("GLOBUS_CLIENT_ID") or None
        self._client_secret = os.environ.get("GLOBUS_CLIENT_SECRET") or None
        if bool(self.client_id) != bool(self._client_secret):
            raise UsageError("Set both GLOBUS_CLIENT_ID and GLOBUS_CLIENT_SECRET (or neither, to log in as yourself)")
        self.confidential = self.client_id is not None
        self._authorizers: dict[str, GlobusAuthorizer] = {}
        self._login_client: globus_sdk.AuthLoginClient | None = None
        self._storage: TokenStorage | None = None
        self.storage_notice = ""
        # Parallel workers may all meet the same ConsentRequired: one person is asked once.
        self._consent_lock = threading.Lock()
        self._consented: dict[str, float] = {}  # scope -> when consent was last obtained

    # -- pieces --
    @property
    def native_client_id(self) -> str:
        return registered_app_id() or NATIVE_CLIENT_ID

    def needs_app_id(self) -> bool:
        """A person's login would reach the real service with the placeholder id, which it refuses."""
        return not self.confidential and app_id_needed()

    def _refuse_placeholder_id(self) -> None:
        """Before a person's login that the real service would refuse: say why and what to do."""
        if self.needs_app_id():
            raise AuthError(
                "Ferry has no registered Globus app id yet, so Globus would refuse the login: register one "
                f"(once, at {REGISTRATION_URL}, a thick client), then paste its Client UUID when the "
                "window's Globus login asks, or set FERRY_GLOBUS_NATIVE_CLIENT_ID (or use "
                "GLOBUS_CLIENT_ID/GLOBUS_CLIENT_SECRET)",
                action=Action.LOGIN,
            )

    def login_client(self) -> globus_sdk.AuthLoginClient:
        import globus_sdk

        with self._lock:
            if self._login_client is None:
                if self.confidential:
                    assert self.client_id and self._client_secret
                    self._login_client = globus_sdk.ConfidentialAppAuthClient(self.client_id, self._client_secret)
                else:
                    self._login_client = globus_sdk.NativeAppAuthClient(self.native_client_id, app_name="Ferry")
            return self._login_client

    def storage(self) -> TokenStorage:
        with self._lock:
            if self._storage is None:
                if self.confidential:
                    from globus_sdk.token_storage import MemoryTokenStorage

                    # A service account's tokens are cheap to get again: keep them in memory only.
                    self._storage = MemoryTokenStorage(namespace=f"client:{self.client_id}")
                else:
                    self._storage, self.storage_notice = make_token_storage(f"user:{self.native_client_id}")
            return self._storage

    def extra_scopes(self) -> list[str]:
        return list(_load_prefs().get("consented_collections", []))

    def scopes_by_rs(self) -> dict[str, str]:
        """The scope string requested for each resource server."""
        return {
            TRANSFER_RS: transfer_scope_with(self.extra_scopes()),
            TIMERS_RS: f"{TIMERS_SCOPE}[*{transfer_scope_with(self.extra_scopes())}]",
            AUTH_RS: " ".join(AUTH_SCOPES),
        }

    # -- authorizers --
    def dynamic(self, resource_server: str) -> _DynamicAuthorizer:
        return _DynamicAuthorizer(self, resource_server)

    def authorizer(self, resource_server: str, scope: str | None = None) -> GlobusAuthorizer:
        import globus_sdk

        with self._lock:
            cached = self._authorizers.get(resource_server)
            if cached is not None:
                return cached
            scope = scope or self.scopes_by_rs().get(resource_server)
            storage = self.storage()
            data = storage.get_token_data(resource_server)
            if self.confidential:
                if scope is None:
                    raise AuthError(f"No Globus scope known for {resource_server}")
                client = self.login_client()
                assert isinstance(client, globus_sdk.ConfidentialAppAuthClient)
                az: GlobusAuthorizer = globus_sdk.ClientCredentialsAuthorizer(
                    client,
                    scope,
                    access_token=data.access_token if data else None,
                    expires_at=data.expires_at_seconds if data else None,
                    on_refresh=storage.store_token_response,
                )
            else:
                if data is None:
                    raise AuthError(
                        "Not logged in to Globus: run 'ferry globus login' (or set GLOBUS_CLIENT_ID and "
                        "GLOBUS_CLIENT_SECRET for a service account)",
                        action=Action.LOGIN,
                    )
                if data.refresh_token:
                    az = globus_sdk.RefreshTokenAuthorizer(
                        data.refresh_token,
                        self.login_client(),
                        access_token=data.access_token,
                        expires_at=data.expires_at_seconds,
                        on_refresh=self._store_refreshed,
                    )
                elif data.expires_at_seconds > time.time():
                    az = globus_sdk.AccessTokenAuthorizer(data.access_token)
                else:
                    raise AuthError("Your Globus login has expired: run 'ferry globus login'", action=Action.LOGIN)
            self._authorizers[resource_server] = az
            return az

    def _store_refreshed(self, response: globus_sdk.OAuthTokenResponse) -> None:
        """Save refreshed tokens, keeping the refresh token when the service did not send a new one."""
        from globus_sdk.token_storage import TokenStorageData

        storage = self.storage()
        updates: dict[str, TokenStorageData] = {}
        for rs, tok in response.by_resource_server.items():
            old = storage.get_token_data(rs)
            updates[rs] = TokenStorageData(
                resource_server=rs,
                identity_id=old.identity_id if old else None,
                scope=tok["scope"],
                access_token=tok["access_token"],
                refresh_token=tok.get("refresh_token") or (old.refresh_token if old else None),
                expires_at_seconds=tok["expires_at_seconds"],
                token_type=tok.get("token_type"),
            )
        storage.store_token_data_by_resource_server(updates)

    # -- clients (SDK clients: the environment variables apply) --
    def transfer_client(self) -> globus_sdk.TransferClient:
        import globus_sdk

        return globus_sdk.TransferClient(authorizer=self.dynamic(TRANSFER_RS))  # type: ignore[arg-type]

    def timers_client(self) -> globus_sdk.TimersClient:
        import globus_sdk

        return globus_sdk.TimersClient(authorizer=self.dynamic(TIMERS_RS))  # type: ignore[arg-type]

    def auth_client(self) -> globus_sdk.AuthClient:
        import globus_sdk

        return globus_sdk.AuthClient(authorizer=self.dynamic(AUTH_RS))  # type: ignore[arg-type]

    def https_authorizer(self, collection: str) -> GlobusAuthorizer:
        """A token for a collection's HTTPS server (its own resource server: the collection id)."""
        try:
            return self.authorizer(collection, https_scope(collection))
        except AuthError:
            if self.confidential:
                raise
        self.consent([https_scope(collection)], f"reading and writing files on collection {collection} over HTTPS")
        return self.authorizer(collection, https_scope(collection))

    # -- login, consent, logout --
    def logged_in(self) -> bool:
        if self.confidential:
            return True
        return self.storage().get_token_data(TRANSFER_RS) is not None

    def login(self, extra_scopes: Iterable[str] = (), *, force: bool = False) -> None:
        """Run the person's login flow (or, for a client, fetch tokens now to prove the secret works)."""
        from globus_sdk import GlobusAPIError, NetworkError

        extra = list(extra_scopes)
        self._refuse_placeholder_id()
        try:
            if self.confidential:
                with self._lock:
                    self._authorizers.clear()
                for rs in (TRANSFER_RS, *[s.split("/")[-2] for s in extra if s.endswith("/https")]):
                    az = self.authorizer(rs)
                    az.get_authorization_header()
                return
            if not force and not extra and self.logged_in():
                return
            self._run_user_flow(extra)
        except GlobusAPIError as exc:
            raise AuthError(
                f"Globus login failed: {exc.message or exc.code}",
                detail=f"HTTP {exc.http_status} {exc.code}",
                action=Action.LOGIN,
            ) from None
        except NetworkError as exc:
            raise Transient(f"Cannot reach Globus Auth: {type(exc).__name__}") from None

    def _run_user_flow(self, extra: list[str]) -> None:
        from globus_sdk.gare import GlobusAuthorizationParameters

        from ferry.credentials.prompts import NobodyToAsk, prompter

        if isinstance(prompter(), NobodyToAsk):
            # No terminal and no window (cron, a pipeline): a browser login would wait for a person
            # who is not there. Refuse at once, saying what works unattended.
            raise AuthError(
                "Logging in to Globus needs a person at a terminal or the desktop app: run 'ferry globus login' "
                "there once (tokens are kept and refreshed), or set GLOBUS_CLIENT_ID and GLOBUS_CLIENT_SECRET "
                "for a service account",
                action=Action.LOGIN,
            )
        from globus_sdk.login_flows.local_server_login_flow_manager import LocalServerEnvironmentalLoginError

        scopes = list(self.scopes_by_rs().values())
        # Keep HTTPS tokens for collections already consented to (one resource server each).
        for rs, data in self.storage().get_token_data_by_resource_server().items():
            if rs not in (TRANSFER_RS, TIMERS_RS, AUTH_RS):
                scopes.append(data.scope)
        scopes += [s for s in extra if s not in scopes]
        params = GlobusAuthorizationParameters(required_scopes=scopes)
        client = self.login_client()
        response = None
        if _browser_possible():
            try:
                manager = _browser_flow_class()(client, request_refresh_tokens=True)
                response = manager.run_login_flow(params)
            except LocalServerEnvironmentalLoginError:
                response = None  # fall back to pasting the code
        if response is None:
            manager2 = _PromptingLoginFlow(client, request_refresh_tokens=True)
            response = manager2.run_login_flow(params)
        with self._lock:
            self.storage().store_token_response(response)
            self._authorizers.clear()

    def consent(self, required_scopes: list[str], why: str) -> None:
        """The service asked for consent: get it (asking the person), remember it, so the caller retries."""
        with self._consent_lock:
            now = time.monotonic()
            if required_scopes and all(now - self._consented.get(s, -1e9) < 60 for s in required_scopes):
                return  # another thread just got exactly this consent: retry with the new tokens
            self._consent(required_scopes, why)
            for s in required_scopes:
                self._consented[s] = time.monotonic()

    def _consent(self, required_scopes: list[str], why: str) -> None:
        collections = _collections_in(required_scopes)
        prefs = _load_prefs()
        known = set(prefs.get("consented_collections", []))
        if collections - known:
            prefs["consented_collections"] = sorted(known | collections)
            _save_prefs(prefs)
        if self.confidential:
            with self._lock:
                # The client-credentials grant asks for the new scopes on the next call.
                self._authorizers.clear()
                for rs in list(self.storage().get_token_data_by_resource_server()):
                    self.storage().remove_token_data(rs)
            return
        from ferry.credentials.prompts import prompter

        answer = prompter().ask(
            "Globus consent",
            f"Globus needs your consent for {why}. Log in again now to give it? [y/N] ",
            echo=True,
        )
        if answer.strip().lower() not in ("y", "yes"):
            raise AuthError(
                f"Globus needs your consent for {why}: run 'ferry globus login' and accept, then try again",
                action=Action.CONSENT,
            )
        self.login(extra_scopes=required_scopes, force=True)

    def logout(self) -> list[str]:
        """Revoke and forget the person's tokens; return the resource servers removed."""
        from globus_sdk import GlobusAPIError, NetworkError

        storage = self.storage()
        removed = []
        client = self.login_client()
        for rs, data in storage.get_token_data_by_resource_server().items():
            for token in (data.access_token, data.refresh_token):
                if token:
                    try:
                        client.oauth2_revoke_token(token)
                    except (GlobusAPIError, NetworkError):
                        pass  # forgetting locally is what matters; a dead token cannot be revoked
            storage.remove_token_data(rs)
            removed.append(rs)
        with self._lock:
            self._authorizers.clear()
        if not self.confidential and token_file().exists() and not storage.get_token_data_by_resource_server():
            token_file().unlink()  # nothing left to keep: leave no file behind
        return removed

    def whoami(self) -> dict[str, str]:
        """Who Ferry acts as: the person's primary identity, or the service account."""
        from globus_sdk import GlobusAPIError

        if self.confidential:
            return {"kind": "client", "client_id": str(self.client_id)}
        try:
            info = self.auth_client().userinfo()
        except GlobusAPIError as exc:
            raise AuthError(f"Globus did not say who you are: {exc.message or exc.code}", action=Action.LOGIN) from None
        return {
            "kind": "user",
            "username": str(info.get("preferred_username", "")),
            "name": str(info.get("name", "")),
            "email": str(info.get("email", "") or ""),
            "identity_id": str(info.get("sub", "")),
        }


def _collections_in(scopes: Iterable[str]) -> set[str]:
    import re

    found: set[str] = set()
    for s in scopes:
        found.update(re.findall(r"https://auth\.globus\.org/scopes/([0-9a-fA-F-]{36})/data_access", s))
    return found


def _prompting_flow_class() -> type[Any]:
    from globus_sdk.login_flows import CommandLineLoginFlowManager

    class _Flow(CommandLineLoginFlowManager):
        """The paste-the-code flow, asked through Ferry's prompter (a terminal or a GUI dialog)."""

        def print_authorize_url(self, authorize_url: str) -> None:
            self._url = authorize_url

        def prompt_for_code(self) -> str:
            from ferry.credentials.prompts import prompter

            code = (
                prompter()
                .ask(
                    "Globus login",
                    f"Open this address in a browser, log in, and paste the code shown:\n  {self._url}\nCode: ",
                    echo=True,
                )
                .strip()
            )
            if not code:
                raise AuthError("Globus login cancelled: no code was entered", action=Action.LOGIN)
            return code

    return _Flow


def _browser_flow_class() -> type[Any]:
    from globus_sdk.login_flows import LocalServerLoginFlowManager
    from globus_sdk.login_flows.local_server_login_flow_manager import local_server_login_flow_manager as lsm

    class _BrowserFlow(LocalServerLoginFlowManager):
        """The SDK's local-redirect flow, also printing the address: a browser that 'opened' may
        not have (a remote display, a sandbox), and the person needs a way in."""

        def run_login_flow(self, auth_parameters: Any) -> Any:
            lsm._check_remote_session()
            with self.background_local_server() as server:
                host, port = server.socket.getsockname()
                url = self._get_authorize_url(auth_parameters, f"http://{host}:{port}")
                sys.stderr.write(
                    "Opening the Globus login page in your browser. If it does not open, visit:\n"
                    f"  {url}\n(waiting for the login to finish; Ctrl+C to stop)\n"
                )
                sys.stderr.flush()
                lsm._open_webbrowser(url)
                code = server.wait_for_code()
            if isinstance(code, BaseException):
                raise AuthError(f"Globus login failed: {code}", action=Action.LOGIN)
            return self.login_client.oauth2_exchange_code_for_tokens(code)

    return _BrowserFlow


class _PromptingLoginFlow:
    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return _prompting_flow_class()(*args, **kwargs)


_shared: GlobusAuth | None = None
_shared_lock = threading.Lock()


def registered_app_id() -> str | None:
    """The person's or site's own native-app id: FERRY_GLOBUS_NATIVE_CLIENT_ID, else the saved one."""
    saved = _load_prefs().get(APP_ID_KEY)
    return os.environ.get("FERRY_GLOBUS_NATIVE_CLIENT_ID") or (str(saved) if saved else None)


def app_id_needed() -> bool:
    """No app id of one's own, and the login would go to the real Globus (a test or sandbox
    service accepts any id)."""
    if registered_app_id():
        return False
    environment = os.environ.get("GLOBUS_SDK_ENVIRONMENT", "production")
    return not os.environ.get("GLOBUS_SDK_SERVICE_URL_AUTH") and environment in ("", "production")


def save_app_id(text: str) -> str:
    """Check and keep the Client UUID a person pasted (in globus.json, written whole then renamed).
    Anything but a UUID is refused with a one-line UsageError and nothing is saved."""
    import uuid

    cleaned = text.strip().strip('"').strip("'")
    try:
        value = str(uuid.UUID(cleaned))
    except ValueError:
        raise UsageError(
            f"{cleaned[:60]!r} is not a Globus Client UUID (it looks like 1b0dc9d3-0a2b-4000-8bdc-2c2fb9f7b4e1)"
        ) from None
    if value == NATIVE_CLIENT_ID:
        raise UsageError("That is Ferry's placeholder id, not a registered one: paste your app's Client UUID")
    prefs = _load_prefs()
    prefs[APP_ID_KEY] = value
    _save_prefs(prefs)
    return value


def shared_auth() -> GlobusAuth:
    """One login manager per process (re-created when the environment's client changes: tests)."""
    global _shared
    with _shared_lock:
        cid = os.environ.get("GLOBUS_CLIENT_ID") or None
        if _shared is None or _shared.client_id != cid:
            _shared = GlobusAuth()
        return _shared


def reset_shared_auth() -> None:
    global _shared
    with _shared_lock:
        _shared = None
