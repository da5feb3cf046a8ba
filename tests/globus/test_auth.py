"""A person's Globus login in this process against the local fake: the paste-the-code flow through
Ferry's prompter, tokens in the keychain (one entry per resource server) or an owner-only file,
refresh, logout, and consent asked and given before a retry."""

from __future__ import annotations

import json
import re
import stat
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from ferry.backends.globus import GlobusBackend
from ferry.core.address import parse_address
from ferry.core.errors import Action, AuthError
from ferry.credentials import globus_auth
from ferry.credentials.prompts import set_prompter
from globus.fake_globus import FakeGlobusServer


class BrowserPerson:
    """Answers Ferry's questions as a person would: opens the login URL (the fake issues a code for
    exactly the scopes the URL asked for) and pastes the code; says yes (or no) to consent."""

    def __init__(self, server: FakeGlobusServer, consent: bool = True) -> None:
        self.server = server
        self.consent = consent
        self.asked: list[str] = []
        self.scopes_seen: list[list[str]] = []

    def ask(self, title: str, prompt: str, *, echo: bool) -> str:
        self.asked.append(title)
        if title == "Globus consent":
            return "y" if self.consent else "n"
        url = re.search(r"(https?://\S+)", prompt)
        assert url, prompt
        query = parse_qs(urlsplit(url.group(1)).query)
        assert query["access_type"] == ["offline"]  # refresh tokens asked for
        scopes = query["scope"][0].split(" ")
        self.scopes_seen.append(scopes)
        code = f"code-{len(self.asked)}"
        self.server.fake.auth_codes[code] = _group(scopes)
        return code

    def confirm_host_key(self, host: str, key_type: str, fingerprint: str) -> str:
        return "no"


def _group(scopes: list[str]) -> list[str]:
    """Re-join dependent scopes split on spaces inside brackets."""
    out: list[str] = []
    depth = 0
    for s in scopes:
        if depth:
            out[-1] += " " + s
        else:
            out.append(s)
        depth += s.count("[") - s.count("]")
    return out


@pytest.fixture
def person(in_process: FakeGlobusServer) -> Any:
    p = BrowserPerson(in_process)
    set_prompter(p)
    yield p
    from ferry.credentials.prompts import NobodyToAsk

    set_prompter(NobodyToAsk())


def _stored() -> dict[tuple[str, str], str]:
    from keyring_memory import MemoryKeyring

    return dict(MemoryKeyring.store)


def test_login_keeps_one_keychain_entry_per_resource_server(in_process: FakeGlobusServer, person: Any) -> None:
    auth = globus_auth.shared_auth()
    assert not auth.logged_in()
    auth.login()
    keys = sorted(k for _, k in _stored())
    prefix = "globus:production:user:"
    rs = sorted(k.rsplit(":", 1)[1] for k in keys if k.startswith(prefix))
    assert rs == sorted(["index", globus_auth.TRANSFER_RS, globus_auth.AUTH_RS, globus_auth.TIMERS_RS])
    data = json.loads(next(v for (_, k), v in _stored().items() if k.endswith(":" + globus_auth.TRANSFER_RS)))
    assert data["refresh_token"] and data["access_token"]
    assert not globus_auth.token_file().exists()  # a keychain exists: no token file
    assert auth.whoami()["username"] == "researcher@example.org"
    assert person.asked == ["Globus login"]


def test_refresh_token_renews_an_expired_access_token(in_process: FakeGlobusServer, person: Any) -> None:
    fake = in_process.fake
    a = fake.add_collection()
    fake.put(a, "/d/x", b"1")
    auth = globus_auth.shared_auth()
    auth.login()
    storage = auth.storage()
    old = storage.get_token_data(globus_auth.TRANSFER_RS)
    assert old is not None
    old_dict = old.to_dict()
    old_dict["expires_at_seconds"] = 1  # long expired
    fake.tokens[old.access_token].expires = 0
    from globus_sdk.token_storage import TokenStorageData

    storage.store_token_data_by_resource_server({globus_auth.TRANSFER_RS: TokenStorageData.from_dict(old_dict)})
    globus_auth.reset_shared_auth()
    backend = GlobusBackend(parse_address(f"globus://{a}/d"))
    assert [e.name for e in backend.list("/d")] == ["x"]
    new = globus_auth.shared_auth().storage().get_token_data(globus_auth.TRANSFER_RS)
    assert new is not None and new.access_token != old.access_token
    assert new.refresh_token == old.refresh_token  # kept
    assert new.expires_at_seconds > 1


def test_logout_revokes_and_forgets(in_process: FakeGlobusServer, person: Any) -> None:
    auth = globus_auth.shared_auth()
    auth.login()
    issued = set(in_process.fake.tokens)
    assert auth.logout()
    assert not [k for _, k in _stored() if k.startswith("globus:")]
    assert not issued & set(in_process.fake.tokens)  # revoked on the service too
    with pytest.raises(AuthError) as err:
        auth.authorizer(globus_auth.TRANSFER_RS)
    assert "ferry globus login" in err.value.message


def test_without_keychain_tokens_go_to_an_owner_only_file_with_a_notice(
    in_process: FakeGlobusServer, person: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ferry.credentials import keychain

    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    keychain.reset()
    globus_auth.reset_shared_auth()
    auth = globus_auth.shared_auth()
    auth.login()
    path = globus_auth.token_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "readable only by you" in auth.storage_notice and str(path) in auth.storage_notice
    assert globus_auth.TRANSFER_RS in path.read_text()
    auth.logout()
    assert not path.exists() or globus_auth.TRANSFER_RS not in path.read_text()


def test_consent_required_asks_logs_in_with_the_scope_and_retries(in_process: FakeGlobusServer, person: Any) -> None:
    fake = in_process.fake
    a = fake.add_collection()
    fake.put(a, "/d/x", b"1")
    fake.consent_collections.add(a)
    globus_auth.shared_auth().login()
    backend = GlobusBackend(parse_address(f"globus://{a}/d"))
    assert [e.name for e in backend.list("/d")] == ["x"]
    assert person.asked == ["Globus login", "Globus consent", "Globus login"]
    assert any(f"{a}/data_access" in s for s in person.scopes_seen[-1])
    assert fake.consent_refusals == 1
    # remembered: a later fresh login asks for it from the start
    assert a in globus_auth.shared_auth().extra_scopes()


def test_consent_refused_is_an_auth_error_with_the_consent_action(in_process: FakeGlobusServer, person: Any) -> None:
    fake = in_process.fake
    a = fake.add_collection()
    fake.put(a, "/d", None)
    fake.consent_collections.add(a)
    globus_auth.shared_auth().login()
    person.consent = False
    backend = GlobusBackend(parse_address(f"globus://{a}/d"))
    with pytest.raises(AuthError) as err:
        list(backend.list("/d"))
    assert err.value.action is Action.CONSENT
    assert "consent" in err.value.message and "ferry globus login" in err.value.message


def test_not_logged_in_says_how(in_process: FakeGlobusServer) -> None:
    a = in_process.fake.add_collection()
    backend = GlobusBackend(parse_address(f"globus://{a}/"))
    with pytest.raises(AuthError) as err:
        backend.stat("/")
    assert "ferry globus login" in err.value.message and "GLOBUS_CLIENT_ID" in err.value.message


def test_only_one_of_client_id_and_secret_is_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    from ferry.core.errors import UsageError

    monkeypatch.setenv("GLOBUS_CLIENT_ID", "x")
    monkeypatch.delenv("GLOBUS_CLIENT_SECRET", raising=False)
    with pytest.raises(UsageError):
        globus_auth.GlobusAuth()


def test_https_scope_is_asked_for_once_on_first_use(in_process: FakeGlobusServer, person: Any) -> None:
    fake = in_process.fake
    a = fake.add_collection()
    fake.enable_https(a)
    fake.put(a, "/d/x.bin", b"0123456789")
    globus_auth.shared_auth().login()
    backend = GlobusBackend(parse_address(f"globus://{a}/d"))
    results: list[bytes] = []

    def read() -> None:
        with backend.open_read("/d/x.bin", 2, 5) as f:
            results.append(f.read())

    import threading

    threads = [threading.Thread(target=read) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [b"23456"] * 3
    assert person.asked.count("Globus consent") == 1  # one question, however many workers
    assert any(s == f"https://auth.globus.org/scopes/{a}/https" for s in person.scopes_seen[-1])
    # the HTTPS token is kept with the others, under the collection's own resource server
    assert globus_auth.shared_auth().storage().get_token_data(a) is not None


def test_browser_login_through_a_local_redirect(
    in_process: FakeGlobusServer, person: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A desktop session: the login page opens in a browser (here curl, following the fake's
    redirect back to Ferry's short-lived local server), and no code is pasted."""
    import shutil

    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is needed to play the browser")
    monkeypatch.delenv("FERRY_GLOBUS_NO_BROWSER")
    monkeypatch.delenv("SSH_CONNECTION", raising=False)
    monkeypatch.delenv("SSH_TTY", raising=False)
    monkeypatch.setenv("DISPLAY", ":99")
    monkeypatch.setenv("BROWSER", f"{curl} -sfL -o /dev/null %s")
    import webbrowser

    monkeypatch.setattr(webbrowser, "_tryorder", None)  # re-read BROWSER
    globus_auth.shared_auth().login()
    assert person.asked == []  # nothing typed
    assert globus_auth.shared_auth().logged_in()
    assert "/v2/oauth2/authorize?" in capsys.readouterr().err  # the address is shown too
