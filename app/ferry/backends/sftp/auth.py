"""Who the host is and who we are: host keys checked against known_hosts, then the login.

Host keys: an unknown key goes to the prompter (fingerprint shown, the person decides), a
changed key is refused naming the file and line. Nothing is ever accepted silently.

The login tries agent keys, key files, keyboard-interactive and the password, in OpenSSH's
order; a server that wants two factors (publickey then keyboard-interactive) gets both. Every
question goes through :mod:`ferry.credentials.prompts`.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import socket
from collections.abc import Callable, Iterator
from typing import Any

from ferry.backends.sftp import paramiko_adapter as adapter
from ferry.backends.sftp.errors import HostKeyChanged, HostKeyError
from ferry.core.errors import AuthError, FerryError
from ferry.credentials import prompts
from ferry.credentials.ssh_config import SshTarget

log = logging.getLogger("ferry.sftp")


def fingerprint(key: Any) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class HostKeys:
    """Checks one host's key on every connection; remembers the keys trusted "once" this run."""

    def __init__(self, target: SshTarget) -> None:
        self.target = target
        self._trusted_once: set[str] = set()

    def check(self, transport: Any) -> None:
        t = self.target
        key = transport.get_remote_server_key()
        name = t.host_key_name
        print_ = fingerprint(key)
        if self._known(key, name, print_) or print_ in self._trusted_once:
            return
        if t.strict_host_key_checking == "yes":
            raise HostKeyError(
                f"Unknown host key for {name} ({key.get_name()} {print_}) and StrictHostKeyChecking is yes"
            )
        entry = f"{name} {key.get_name()} {key.get_base64()}"  # exactly what "save" appends, shown first
        answer = prompts.confirm_host_key(name, key.get_name(), print_, known_hosts_line=entry)
        if answer == "save" and t.known_hosts_files:
            path = t.known_hosts_files[0]
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "a", encoding="utf-8") as f:
                f.write(entry + "\n")
        elif answer != "once" and answer != "save":
            raise HostKeyError(f"Unknown host key for {name} ({key.get_name()} {print_}) was not trusted", action=None)
        self._trusted_once.add(print_)

    def known_types(self) -> list[str]:
        """The key types known_hosts holds for this host, in file order (``ssh-ed25519``, ...)."""
        types: list[str] = []
        for _path, known in self._lookups():
            types.extend(t for t in known if t not in types)
        return types

    def _lookups(self) -> Iterator[tuple[str, Any]]:
        import paramiko

        for path in self.target.known_hosts_files:
            try:
                keys = paramiko.HostKeys(path)
            except (OSError, paramiko.SSHException):
                continue
            known = keys.lookup(self.target.host_key_name)
            if known:
                yield path, known

    def _known(self, key: Any, name: str, print_: str) -> bool:
        """True when a known_hosts file holds this very key; :class:`HostKeyChanged` when one
        holds another key of the same type, or keys of other types only (the server offered
        none of those: see :meth:`known_types`); False when none knows the host at all."""
        other: tuple[str, str] | None = None
        for path, known in self._lookups():
            if key.get_name() not in known:
                other = other or (path, next(iter(known.keys())))
                continue
            if known[key.get_name()] == key:
                return True
            line = _known_hosts_line(path, name, key.get_name())
            raise HostKeyChanged(
                f"The host key of {name} has CHANGED ({key.get_name()} {print_}); it does not match "
                f"{path}" + (f" line {line}" if line else "") + ". This may be an attack. If the server's key "
                "was really replaced, remove that line and connect again."
            )
        if other is not None:
            path, known_type = other
            line = _known_hosts_line(path, name, known_type)
            raise HostKeyChanged(
                f"The host key of {name} has CHANGED: the server offers {key.get_name()} {print_}, but "
                f"{path}" + (f" line {line}" if line else "") + f" holds a {known_type} key for it, which the "
                "server no longer offers. This may be an attack. If the server's keys were really replaced, "
                "remove that line and connect again."
            )
        return False


class Authenticator:
    """Logs one transport in as ``target.user``: agent keys, key files, keyboard-interactive,
    password — OpenSSH's order. A server that wants two factors (publickey then
    keyboard-interactive) gets both."""

    def __init__(self, target: SshTarget) -> None:
        self.target = target
        # The key that logged in alone (no second factor, no password): extra connections to
        # the host for one big file (lanes.py) log in with it, asking nobody. None otherwise.
        self.key_only: Any = None
        self._accepted: Any = None

    @property
    def title(self) -> str:
        return f"{self.target.user}@{self.target.hostname}"

    def login(self, transport: Any) -> None:
        tried_key, remaining = self._public_keys(transport)
        if transport.is_authenticated():
            self.key_only = self._accepted
            return
        if (
            tried_key
            and remaining is not None
            and "keyboard-interactive" not in remaining
            and "password" not in remaining
        ):
            raise AuthError(f"Login to {self.title} needs {', '.join(remaining)}, which Ferry cannot do")
        saved = [_saved_password(self.target.site)]  # offered once: a wrong one falls back to asking
        if self._keyboard_interactive(transport, saved):
            return
        self._password(transport, saved)

    def _keys(self) -> Iterator[Any]:
        """Agent keys, then key files (loaded, and a passphrase asked for, only when reached)."""
        t = self.target
        yield from _agent_keys(t.identity_agent, t.identities_only, t.identity_files)
        for path in t.identity_files or _default_identities():
            key = _load_key(path, self.title)
            if key is not None:
                yield key

    def _public_keys(self, transport: Any) -> tuple[bool, list[str] | None]:
        """Offer keys until the server accepts one: (whether one was, the methods it still
        wants then)."""
        import paramiko

        for key in self._keys():
            try:
                remaining = transport.auth_publickey(self.target.user, key)
                self._accepted = key
                return True, remaining
            except paramiko.AuthenticationException:
                continue
        return False, None

    def _keyboard_interactive(self, transport: Any, saved: list[str | None]) -> bool:
        import paramiko

        unanswered: list[BaseException] = []
        try:
            transport.auth_interactive(self.target.user, self._handler(saved, unanswered))
            if transport.is_authenticated():
                return True
        except paramiko.BadAuthenticationType:
            pass
        except paramiko.AuthenticationException as exc:
            if unanswered:
                raise unanswered[0] from exc
            if "keyboard-interactive" not in str(exc).lower():
                raise AuthError(f"Login to {self.title} failed: wrong answer or code") from exc
        if unanswered:
            raise unanswered[0]
        return False

    def _handler(
        self, saved: list[str | None], unanswered: list[BaseException]
    ) -> Callable[[str, str, list[tuple[str, bool]]], list[str]]:
        title = self.title

        def handler(title_: str, instructions: str, fields: list[tuple[str, bool]]) -> list[str]:
            # Runs on paramiko's thread: an unanswerable prompt is kept and raised on ours.
            text = "\n".join(x for x in (title_, instructions) if x)
            answers = []
            try:
                for prompt, echo in fields:
                    if saved[0] is not None and not echo and is_password_prompt(prompt, text):
                        answers.append(saved[0])
                        saved[0] = None
                        continue
                    answers.append(prompts.prompter().ask(title, (text + "\n" if text else "") + prompt, echo=echo))
                    text = ""
            except BaseException as exc:
                unanswered.append(exc)
                raise
            return answers

        return handler

    def _password(self, transport: Any, saved: list[str | None]) -> None:
        import paramiko

        t, title = self.target, self.title
        try:
            if saved[0] is not None:
                try:
                    transport.auth_password(t.user, saved[0])
                except paramiko.BadAuthenticationType:
                    raise
                except paramiko.AuthenticationException:
                    log.info("the password saved for site %s was refused; asking", t.site)
                saved[0] = None
            if not transport.is_authenticated():
                password = prompts.prompter().ask(title, f"{title}'s password: ", echo=False)
                transport.auth_password(t.user, password)
        except paramiko.BadAuthenticationType as exc:
            raise AuthError(f"Login to {title} failed: no usable method (server allows {exc.allowed_types})") from exc
        except paramiko.AuthenticationException as exc:
            raise AuthError(f"Login to {title} failed: wrong password") from exc
        if not transport.is_authenticated():
            raise AuthError(f"Login to {title} failed")


def _agent_keys(identity_agent: str | None, identities_only: bool, files: list[str]) -> list[Any]:
    """Keys the agent offers, as OpenSSH would use them: ``IdentityAgent`` picks the socket
    (``none`` turns the agent off); with ``IdentitiesOnly`` only agent keys matching a listed
    IdentityFile's public key are tried."""
    import paramiko

    if identity_agent is not None and identity_agent.lower() == "none":
        return []
    try:
        if identity_agent is None or identity_agent == "SSH_AUTH_SOCK":
            keys = list(paramiko.Agent().get_keys())
        else:
            path = os.environ.get(identity_agent[1:], "") if identity_agent.startswith("$") else identity_agent
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
            keys = adapter.agent_keys(sock)
    except (paramiko.SSHException, OSError) as exc:
        log.info("no agent keys: %s", exc)
        return []
    if not identities_only:
        return keys
    wanted = set()
    for f in files:
        try:
            with open(f + ".pub", encoding="ascii") as pub:
                wanted.add(pub.read().split()[1])
        except (OSError, IndexError):
            continue
    return [k for k in keys if k.get_base64() in wanted]


def _default_identities() -> list[str]:
    home = os.path.expanduser("~/.ssh")
    names = ("id_ed25519", "id_ecdsa", "id_rsa")
    return [os.path.join(home, n) for n in names if os.path.exists(os.path.join(home, n))]


def _load_key(path: str, title: str) -> Any:
    import paramiko

    try:
        return paramiko.PKey.from_path(path)
    except FileNotFoundError:
        return None
    except (paramiko.PasswordRequiredException, TypeError):
        # paramiko 5 raises TypeError ("Key is password-protected...") for encrypted OpenSSH keys.
        passphrase = prompts.prompter().ask(title, f"Enter passphrase for key '{path}': ", echo=False)
        try:
            return paramiko.PKey.from_path(path, passphrase.encode())  # type: ignore[arg-type]  # needs bytes
        except (paramiko.SSHException, ValueError, TypeError) as exc:
            raise AuthError(f"Wrong passphrase for key {path}") from exc
    except (paramiko.SSHException, OSError, ValueError) as exc:
        log.warning("cannot use key %s: %s", path, exc)
        return None


def _saved_password(site: str | None) -> str | None:
    if not site:
        return None
    from ferry.credentials import keychain

    try:
        return keychain.get_secret(keychain.site_secret_key(site))
    except FerryError:
        return None


_CODE_WORDS = ("code", "otp", "token", "verification", "one-time", "passcode", "pin", "duo", "factor")


def is_password_prompt(prompt: str, text: str) -> bool:
    """Only a plain "Password:" prompt gets the saved password, never a one-time code's."""
    p = prompt.strip().lower()
    if not (p.endswith("password:") or p == "password"):
        return False
    return not any(w in p or w in text.lower() for w in _CODE_WORDS)


def _known_hosts_line(path: str, name: str, key_type: str) -> int | None:
    import paramiko

    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                parts = line.split()
                if len(parts) < 3 or parts[1] != key_type:
                    continue
                for host in parts[0].split(","):
                    if host == name or (host.startswith("|1|") and paramiko.HostKeys.hash_host(name, host) == host):
                        return n
    except OSError:
        return None
    return None
