"""This computer: the laptop's own Globus Connect Personal collection, when installed.

Detection reads GCP's configuration folder (``~/.globusonline`` on Linux and macOS, ``%LOCALAPPDATA%``
on Windows; ``FERRY_GCP_CONFIG_DIR`` overrides it) through the SDK's
:class:`~globus_sdk.LocalGlobusConnectPersonal`, then asks the Transfer service whether that
collection is connected right now.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferry.backends.globus.service import TransferService
from ferry.backends.globus.settings import GlobusSettings
from ferry.core.errors import FerryError


@dataclass(frozen=True)
class ThisComputer:
    collection_id: str
    name: str
    connected: bool | None  # None: could not ask the service (not logged in, offline)
    note: str = ""

    @property
    def state(self) -> str:
        return {True: "connected", False: "offline", None: "unknown"}[self.connected]

    @property
    def address(self) -> str:
        return f"globus://{self.collection_id}/~/"


def gcp_collection_id(settings: GlobusSettings) -> str | None:
    from globus_sdk import LocalGlobusConnectPersonal

    config = settings.gcp_config_dir
    try:
        local = LocalGlobusConnectPersonal(config_dir=config) if config else LocalGlobusConnectPersonal()
        return local.endpoint_id or None
    except OSError:
        return None


def this_computer(settings: GlobusSettings) -> ThisComputer | None:
    """The GCP collection of this computer with its connected/offline state, or None if not installed."""
    cid = gcp_collection_id(settings)
    if cid is None:
        return None
    try:
        doc = TransferService(cid, settings).collection_doc()
    except FerryError as exc:
        return ThisComputer(cid, "This computer", None, exc.message)
    connected = doc.get("gcp_connected")
    paused = bool(doc.get("gcp_paused"))
    return ThisComputer(
        cid,
        f"This computer ({doc.get('display_name') or 'Globus Connect Personal'})",
        bool(connected) and not paused if connected is not None else None,
        "paused in Globus Connect Personal" if paused else "",
    )
