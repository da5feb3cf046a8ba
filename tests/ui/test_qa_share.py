"""QA of issue 20 in the running window: the share dialog shows only what the site can do.

Found under Xvfb (Share link… on README.txt in the demo's S3 bucket): the dialog showed a
"Grant to: user@example.org (Globus grants)" field, greyed out, on a site that makes no Globus
grants. It is now shown only where the site can grant access (Globus)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pytestqt.qtbot import QtBot

from ferry.backends.base import Capabilities
from ferry.backends.globus.backend import _BASE_CAPS as GLOBUS_CAPS
from ferry.ui.dialogs.share import ShareDialog, SiteFacts

S3_CAPS = replace(Capabilities(), presign=True)


def run_now(
    fn: Callable[[], Any], on_done: Callable[[Any], object], on_error: Callable[[BaseException], object]
) -> None:
    try:
        result = fn()
    except BaseException as exc:
        on_error(exc)
        return
    on_done(result)


def grant_row_shown(dlg: ShareDialog) -> bool:
    dlg.show()
    label = getattr(dlg, "grantee_label", None)  # the row's label goes with it
    return dlg.grantee.isVisible() and (label is None or label.isVisible())


def test_the_grant_field_is_shown_only_where_the_site_grants(qtbot: QtBot) -> None:
    s3 = ShareDialog("s3://b/README.txt", "s3", run_now, probe=lambda _t: SiteFacts(S3_CAPS, file_exists=True))
    qtbot.addWidget(s3)
    assert not grant_row_shown(s3)
    globus = ShareDialog("globus://c/d/", "globus", run_now, probe=lambda _t: SiteFacts(GLOBUS_CAPS, file_exists=False))
    qtbot.addWidget(globus)
    assert grant_row_shown(globus)
