"""ssh_config as OpenSSH reads it, for the SFTP backend.

paramiko's :class:`SSHConfig` does the host matching (``Host`` patterns, ``Match host/user``,
``%h``-style tokens); this module fills what it lacks — ``Include`` with globs — and turns the
result into a typed :class:`SshTarget`. Options Ferry does not act on are named in a warning,
never silently ignored. ``StrictHostKeyChecking no`` is *not* honoured: Ferry never accepts an
unknown host key without asking.

The file read is ``$FERRY_SSH_CONFIG`` if set, else ``~/.ssh/config`` (then ``/etc/ssh/ssh_config``).
"""

from __future__ import annotations

import glob
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("ferry.ssh")

SUPPORTED = {
    "host",
    "match",
    "hostname",
    "user",
    "port",
    "identityfile",
    "identitiesonly",
    "identityagent",
    "proxyjump",
    "proxycommand",
    "include",
    "serveraliveinterval",
    "serveralivecountmax",
    "connecttimeout",
    "stricthostkeychecking",
    "userknownhostsfile",
    "globalknownhostsfile",
    # Harmless for Ferry: they change nothing about what it does.
    "forwardagent",
    "forwardx11",
    "compression",
    "loglevel",
    "addkeystoagent",
    "usekeychain",
    "controlmaster",
    "controlpath",
    "controlpersist",
    "requesttty",
    "sendenv",
    "setenv",
    "preferredauthentications",
    "pubkeyauthentication",
    "passwordauthentication",
    "kbdinteractiveauthentication",
    "hashknownhosts",
    "visualhostkey",
    "updatehostkeys",
    "batchmode",
    "canonicalizehostname",
    "canonicaldomains",
    "canonicalizemaxdots",
    "canonicalizefallbacklocal",
    # Debian's /etc/ssh/ssh_config sets these for every host.
    "gssapiauthentication",
    "gssapidelegatecredentials",
}

_INCLUDE_RE = re.compile(r"^\s*include\s+(.+)$", re.IGNORECASE)


def config_paths() -> list[Path]:
    env = os.environ.get("FERRY_SSH_CONFIG")
    if env:
        return [Path(env)]
    return [Path.home() / ".ssh" / "config", Path("/etc/ssh/ssh_config")]


def _expand_includes(path: Path, depth: int = 0) -> list[str]:
    """The file's lines with every ``Include`` replaced by the included files' lines.

    As in OpenSSH, relative paths are under ~/.ssh (user config), globs expand in sorted order,
    and a missing file is not an error.
    """
    if depth > 16:
        log.warning("ssh_config: Include nested too deeply at %s", path)
        return []
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    out: list[str] = []
    for line in lines:
        m = _INCLUDE_RE.match(line)
        if not m:
            out.append(line)
            continue
        for pattern in m.group(1).split():
            pattern = os.path.expanduser(pattern.strip('"'))
            if not os.path.isabs(pattern):
                pattern = str(Path.home() / ".ssh" / pattern)
            for inc in sorted(glob.glob(pattern)):
                out.extend(_expand_includes(Path(inc), depth + 1))
    return out


def _load() -> Any:
    import paramiko

    config = paramiko.SSHConfig()
    for path in config_paths():
        if path.exists():
            from io import StringIO

            config.parse(StringIO("\n".join(_expand_includes(path)) + "\n"))
            break
    return config


@dataclass
class SshTarget:
    """Everything needed to reach one host, after ssh_config."""

    alias: str
    hostname: str
    user: str
    port: int = 22
    identity_files: list[str] = field(default_factory=list)
    identities_only: bool = False
    identity_agent: str | None = None
    proxy_jump: str | None = None
    proxy_command: str | None = None
    server_alive_interval: int = 30
    connect_timeout: float | None = 20.0
    strict_host_key_checking: str = "ask"  # ask or yes
    known_hosts_files: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    site: str | None = None  # the saved site whose options apply (its password is in the keychain)

    @property
    def host_key_name(self) -> str:
        """How known_hosts names this host (``[host]:port`` off port 22)."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def _default_user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # no user name in a container: OpenSSH would fail too
        return "root"


def resolve(host: str, user: str | None = None, port: int | None = None) -> SshTarget:
    """Apply ssh_config to ``host`` (an alias or a host name); explicit user/port win."""
    config = _load()
    opts: dict[str, Any] = dict(config.lookup(host))
    hostname = str(opts.get("hostname", host))
    the_user = user or str(opts.get("user") or _default_user())
    target = SshTarget(
        alias=host,
        hostname=hostname,
        user=the_user,
        port=port or int(opts.get("port", 22)),
        identity_files=[_expand(p, hostname, the_user) for p in opts.get("identityfile", [])],
        identities_only=str(opts.get("identitiesonly", "no")).lower() == "yes",
    )
    if "identityagent" in opts:
        target.identity_agent = os.path.expanduser(str(opts["identityagent"]))
    # ProxyJump and ProxyCommand compete: whichever a matching block names first wins (OpenSSH).
    first = _first_of(config, host, ("proxyjump", "proxycommand"))
    jump = opts.get("proxyjump") if first != "proxycommand" else None
    if jump and str(jump).lower() != "none":
        target.proxy_jump = str(jump)
    cmd = opts.get("proxycommand") if first != "proxyjump" else None
    if cmd and str(cmd).lower() != "none":
        target.proxy_command = str(cmd)
    if "serveraliveinterval" in opts:
        target.server_alive_interval = int(opts["serveraliveinterval"])
    if "connecttimeout" in opts:
        target.connect_timeout = float(opts["connecttimeout"])
    strict = str(opts.get("stricthostkeychecking", "ask")).lower()
    if strict in ("yes", "true"):
        target.strict_host_key_checking = "yes"
    elif strict in ("no", "off", "accept-new"):
        target.warnings.append(
            f"StrictHostKeyChecking {strict} for {host} is not followed: Ferry asks before trusting a new host key"
        )
    files = str(opts.get("userknownhostsfile", "~/.ssh/known_hosts ~/.ssh/known_hosts2")).split()
    target.known_hosts_files = [os.path.expanduser(f) for f in files if f.lower() != "none"]
    for key in sorted(set(opts) - SUPPORTED):
        target.warnings.append(f"ssh_config option {key!r} (for {host}) is not supported by Ferry and has no effect")
    for w in target.warnings:
        log.warning("%s", w)
    return target


def _first_of(config: Any, host: str, keys: tuple[str, ...]) -> str | None:
    """Which of ``keys`` the first block applying to ``host`` sets. paramiko's lookup merges
    blocks and forgets the order; its parsed blocks keep it. A ``Match`` block naming one of the
    keys counts as applying only when the merged lookup has that key (it matched)."""
    merged = config.lookup(host)
    for block in getattr(config, "_config", []):
        found = [k for k in keys if k in block.get("config", {})]
        if not found:
            continue
        if "host" in block:
            if not config._pattern_matches(block["host"], host):
                continue
        elif not any(k in merged for k in found):
            continue
        return str(found[0])
    return None


def _expand(path: str, host: str, user: str) -> str:
    path = path.replace("%h", host).replace("%r", user).replace("%u", _default_user()).replace("%%", "%")
    return os.path.expanduser(path)


def is_alias(name: str) -> bool:
    """True if ssh_config has a ``Host`` entry naming ``name`` literally (not just a wildcard)."""
    for path in config_paths():
        if not path.exists():
            continue
        for line in _expand_includes(path):
            parts = line.strip().split()
            if len(parts) >= 2 and parts[0].lower() == "host" and name in parts[1:]:
                return True
        return False
    return False


SITE_OPTIONS = ("identity_file", "proxy_jump", "user", "port", "streams")  # streams: read by backends/sftp/host.py
ANY_SITE_OPTIONS = ("globus_collection", "globus_path")  # the Globus route's (sites.GLOBUS_COLLECTION, GLOBUS_PATH)


def apply_site(target: SshTarget, site: str, options: dict[str, str], *, user_given: bool, port_given: bool) -> None:
    """A saved site's options over ssh_config, as ``ssh -i KEY -J JUMP -l USER -p PORT`` would
    apply them: the key is tried first (ssh_config's keys after it), the jump host replaces any
    ProxyJump or ProxyCommand, and user/port apply unless the address itself names them."""
    from ferry.core.errors import UsageError

    target.site = site
    key = options.get("identity_file", "").strip()
    if key:
        path = _expand(key, target.hostname, target.user)
        target.identity_files = [path, *[f for f in target.identity_files if f != path]]
    jump = options.get("proxy_jump", "").strip()
    if jump:
        if jump.lower() == "none":
            target.proxy_jump = None
        else:
            target.proxy_jump = jump
        target.proxy_command = None
    if options.get("user", "").strip() and not user_given:
        target.user = options["user"].strip()
        if key:  # %r in the key's path means the user that now applies
            target.identity_files[0] = _expand(key, target.hostname, target.user)
    raw_port = options.get("port", "").strip()
    if raw_port and not port_given:
        if not raw_port.isdigit() or not 0 < int(raw_port) < 65536:
            raise UsageError(f"Site '{site}': port must be a number from 1 to 65535, not {raw_port!r}")
        target.port = int(raw_port)
    for name in sorted(set(options) - set(SITE_OPTIONS) - set(ANY_SITE_OPTIONS)):
        log.warning("site '%s': option %r is not used by SFTP", site, name)
