"""``ferry --selftest``: check that this installation has every part it needs, one line per check.

It exists for the bundle above all: PyInstaller decides what goes in by following imports, and
what it misses (botocore's service models, a Qt plug-in, a native library of ``cryptography``)
only shows when a person first uses that feature. So every check here does a little real work
with the part, offline: builds an S3 client and signs a link with it, signs and verifies with an
SSH key, starts a Globus login URL, opens the keychain, creates and removes a queue database in a
temporary folder, and opens and closes the main window (offscreen when there is no display).

Output, one line per check::

    ok      backends: local, memory, sftp, s3, globus
    notice  keychain: No usable system keychain was found on this computer, ...
    FAILED  window: ImportError: ...

then a summary line. Exit 0 when nothing FAILED (a notice is not a failure: a headless server
has no keychain, and Ferry works there by keeping secrets in memory), 1 otherwise, 2 on bad
arguments.

``FERRY_SELFTEST_FAIL=NAME[,NAME...]`` makes the named checks fail on purpose (at their start,
through the same reporting path as a real failure); the tests use it to prove that every check
reports clearly, and a packager can use it to see what a broken check looks like.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import ferry

FAIL_ENV = "FERRY_SELFTEST_FAIL"

OK, NOTICE, FAILED = "ok", "notice", "FAILED"


class Notice(Exception):
    """Not a failure: something the person should know (e.g. there is no keychain here)."""


class ChildFailure(Exception):
    """A check run in a child process failed; the message already names the error."""


class InjectedFailure(Exception):
    """Raised by a check named in ``FERRY_SELFTEST_FAIL``."""


@dataclass(frozen=True)
class Result:
    name: str
    status: str  # OK, NOTICE or FAILED
    text: str
    seconds: float
    trace: str = ""


# ---- the checks, in the order they run; each returns its "ok" sentence ----


def check_backends() -> str:
    from ferry.backends import registry

    # Every backend the registry knows, imported as it would be when first used; all are tried so
    # one line names every backend that is broken, not only the first.
    names, broken = [], []
    for scheme in registry._BACKENDS:
        try:
            cls = registry.backend_class(scheme)
        except Exception as exc:
            broken.append(f"{scheme} ({type(exc).__name__}: {exc})")
        else:
            names.append(f"{scheme} ({cls.__name__})")
    if broken:
        raise RuntimeError(f"cannot load {'; '.join(broken)}; loaded {', '.join(names) or 'none'}")
    return ", ".join(names)


def check_s3_client() -> str:
    import boto3
    from botocore.config import Config

    # Dummy credentials and a loopback endpoint: nothing leaves the machine. Building the client
    # loads botocore's S3 model and endpoint rules, which is exactly what a bundle can lack.
    session = boto3.session.Session(
        aws_access_key_id="FERRYSELFTEST", aws_secret_access_key="selftest", region_name="us-east-1"
    )
    s3 = session.client("s3", endpoint_url="http://127.0.0.1:9", config=Config(signature_version="s3v4"))
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "selftest", "Key": "probe"}, ExpiresIn=60)
    if "X-Amz-Signature=" not in url:
        raise RuntimeError(f"the pre-signed link is not SigV4-signed: {url.split('?')[0]}?...")
    # Credentials from profiles, single sign-on and roles need these models too.
    available = set(session.get_available_services())
    missing = [name for name in ("sts", "sso", "sso-oidc") if name not in available]
    if missing:
        raise RuntimeError(f"botocore has no model for {', '.join(missing)} (AWS profiles and SSO logins would fail)")
    session.client("sts", endpoint_url="http://127.0.0.1:9")
    import botocore

    return f"boto3 {boto3.__version__}, botocore {botocore.__version__}; S3 and STS clients built, link signed"


def check_paramiko() -> str:
    import paramiko

    # Signing and verifying proves the native crypto library (cryptography's Rust/OpenSSL part) loads.
    key = paramiko.ECDSAKey.generate(bits=256)
    msg = key.sign_ssh_data(b"ferry selftest")
    msg.rewind()
    if not key.verify_ssh_sig(b"ferry selftest", msg):
        raise RuntimeError("an ECDSA signature made by paramiko did not verify")
    return f"paramiko {paramiko.__version__}; ECDSA key signed and verified"


def check_globus() -> str:
    import globus_sdk

    client = globus_sdk.NativeAppAuthClient(client_id="00000000-0000-4000-8000-000000000000")
    client.oauth2_start_flow(requested_scopes=globus_sdk.TransferClient.scopes.all)
    url = client.oauth2_get_authorize_url()
    if "code_challenge=" not in url:
        raise RuntimeError("the Globus login link has no PKCE challenge")
    transfer = globus_sdk.TransferClient()
    return f"globus-sdk {globus_sdk.__version__}; login link and transfer client ({transfer.base_url}) built"


def check_keychain() -> str:
    from ferry.credentials import keychain

    status = keychain.keychain_status()
    if not status.available:
        raise Notice(f"no keychain: {status.description}")
    # A read of a name nobody stores: reaches the backend without writing anything.
    keychain.get_secret("selftest:probe")
    if not keychain.keychain_available():  # the read downgraded it: the keychain broke on use
        raise Notice(f"no keychain: {keychain.keychain_description()}")
    return status.description


def check_queue() -> str:
    from ferry.transfers.options import JobOptions
    from ferry.transfers.store import Store

    with tempfile.TemporaryDirectory(prefix="ferry-selftest-") as tmp:
        path = Path(tmp) / "queue.db"
        store = Store(path)
        try:
            job_id = store.create_job(["/selftest/a"], "/selftest/b", JobOptions(), [])
            job = store.job(job_id)
            if job.state != "queued":
                raise RuntimeError(f"a new job reads back as '{job.state}', not 'queued'")
        finally:
            store.close()
    if Path(tmp).exists():
        raise RuntimeError(f"the temporary folder {tmp} was not removed")
    import sqlite3

    return f"created, used and removed a queue database (SQLite {sqlite3.sqlite_version})"


def _headless() -> bool:
    if sys.platform in ("darwin", "win32"):
        return False
    return not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _self_command() -> list[str]:
    """How to start this same Ferry again: the bundle's executable, or this Python with ``-m ferry``."""
    if getattr(sys, "frozen", False):
        return [sys.executable]
    return [sys.executable, "-m", "ferry"]


WINDOW_PROBE = "--window-probe"  # internal: the child process that check_window starts
_PROBE_OK = "window-probe-ok: "


def check_window() -> str:
    """Open the main window in a child process.

    Qt aborts the whole process when it cannot load its platform plug-in (a library missing from
    the bundle, a broken display): in a child, that becomes one FAILED line with Qt's own message
    instead of a crash that hides every other result.
    """
    env = dict(os.environ)
    platform = env.get("QT_QPA_PLATFORM") or "default"
    if _headless() and not env.get("QT_QPA_PLATFORM"):
        env["QT_QPA_PLATFORM"] = platform = "offscreen"  # for this step only
    # A throwaway profile: the window opens a queue and saves its geometry on close, and a
    # self-test must not create or change the person's own.
    with tempfile.TemporaryDirectory(prefix="ferry-selftest-window-") as profile:
        for var, sub in (("FERRY_DATA_DIR", "data"), ("FERRY_CONFIG_DIR", "config"), ("XDG_CONFIG_HOME", "xdg")):
            env[var] = os.path.join(profile, sub)
        env.pop("FERRY_QUEUE_DB", None)
        try:
            proc = subprocess.run(
                [*_self_command(), "--selftest", WINDOW_PROBE],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=120,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ChildFailure("the main window did not open and close within 120 s") from None
    for line in proc.stdout.splitlines():
        if line.startswith(_PROBE_OK) and proc.returncode == 0:
            return f"{line[len(_PROBE_OK) :]} ({platform})"
    # The probe's own error line if it got that far, else the last thing Qt said before dying.
    said = [ln.strip() for ln in (proc.stdout + "\n" + proc.stderr).splitlines() if ln.strip()]
    errors = [ln for ln in said if ln.startswith("window-probe-error: ")]
    detail = f"\n{proc.stderr.rstrip()}" if os.environ.get("FERRY_SELFTEST_VERBOSE") and proc.stderr.strip() else ""
    if errors:
        raise ChildFailure(errors[-1][len("window-probe-error: ") :] + detail)
    how = f"exit {proc.returncode}" if proc.returncode >= 0 else f"killed by signal {-proc.returncode}"
    tail = " | ".join(said[-3:]) or "no output"
    raise ChildFailure(f"Qt could not start ({how}): {tail}{detail}")


def _window_probe() -> int:
    """The child side of :func:`check_window`: one line on stdout, exit 0 only if all went well."""
    try:
        from ferry.ui.window_check import open_and_close

        text = open_and_close()
    except Exception as exc:
        sys.stdout.write(f"window-probe-error: {type(exc).__name__}: {exc}\n")
        if os.environ.get("FERRY_SELFTEST_VERBOSE"):
            traceback.print_exc()
        return 1
    sys.stdout.write(f"{_PROBE_OK}{text}\n")
    return 0


CHECKS: tuple[tuple[str, Callable[[], str]], ...] = (
    ("backends", check_backends),
    ("s3-client", check_s3_client),
    ("paramiko", check_paramiko),
    ("globus-sdk", check_globus),
    ("keychain", check_keychain),
    ("queue-db", check_queue),
    ("window", check_window),
)


def _injected() -> set[str]:
    return {n.strip() for n in os.environ.get(FAIL_ENV, "").split(",") if n.strip()}


def run_check(name: str, func: Callable[[], str]) -> Result:
    start = time.monotonic()
    try:
        if name in _injected():
            raise InjectedFailure(f"failed on purpose ({FAIL_ENV} names '{name}')")
        text = func()
    except Notice as exc:
        return Result(name, NOTICE, str(exc), time.monotonic() - start)
    except Exception as exc:
        # ImportError & co. are the usual bundle failures: the type and message say what is missing.
        text = str(exc) if isinstance(exc, ChildFailure) else f"{type(exc).__name__}: {exc}".strip()
        return Result(name, FAILED, text, time.monotonic() - start, traceback.format_exc())
    return Result(name, OK, text, time.monotonic() - start)


def _where() -> str:
    if getattr(sys, "frozen", False):
        return f"bundle at {Path(sys.executable).resolve().parent}"
    return f"source at {Path(ferry.__file__).resolve().parent}"


_USAGE = """usage: ferry --selftest [--verbose] [--list]

Check that this installation of Ferry has every part it needs; print one line per check.
  --verbose   show the full traceback of a failed check
  --list      print the names of the checks and exit
Exit 0 when no check failed, 1 otherwise. FERRY_SELFTEST_FAIL=NAME[,NAME] fails checks on purpose.
"""


def main(argv: list[str]) -> int:
    if argv == [WINDOW_PROBE]:
        return _window_probe()
    verbose = False
    for arg in argv:
        if arg in ("-h", "--help"):
            sys.stdout.write(_USAGE)
            return 0
        if arg == "--list":
            sys.stdout.write("".join(f"{name}\n" for name, _ in CHECKS))
            return 0
        if arg in ("-v", "--verbose"):
            verbose = True
            os.environ["FERRY_SELFTEST_VERBOSE"] = "1"  # the window check's child process shows its traceback
            continue
        sys.stderr.write(_USAGE)
        sys.stderr.write(f"ferry: error: unknown selftest option '{arg}'\n")
        return 2
    unknown = _injected() - {name for name, _ in CHECKS}
    if unknown:
        sys.stderr.write(f"ferry: error: {FAIL_ENV} names unknown checks: {', '.join(sorted(unknown))}\n")
        return 2

    out = sys.stdout
    out.write(f"ferry {ferry.__version__} selftest (Python {sys.version.split()[0]}, {_where()})\n")
    out.flush()
    results = []
    for name, func in CHECKS:
        result = run_check(name, func)
        results.append(result)
        # Flushed per line: if a check crashes the process, the lines before it are still seen.
        out.write(f"{result.status:<7} {name}: {result.text}\n")
        if verbose and result.trace:
            out.write("".join(f"        {line}\n" for line in result.trace.rstrip().splitlines()))
        out.flush()
    failed = [r.name for r in results if r.status == FAILED]
    notices = sum(r.status == NOTICE for r in results)
    if failed:
        out.write(f"selftest: {len(failed)} of {len(results)} checks FAILED ({', '.join(failed)})\n")
        return 1
    extra = f", {notices} notice{'s' if notices != 1 else ''}" if notices else ""
    out.write(f"selftest: all {len(results)} checks passed{extra}\n")
    return 0
