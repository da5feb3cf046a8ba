"""``ferry sites``: save, list and forget named sites (``NAME:path`` shortcuts).

Site settings go to ``sites.toml``; a password given with ``--password`` goes to the system keychain
only. Without a keychain the password is not stored at all (a one-shot command has no session to
keep it in), and the command says so; the site itself is still saved.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from typing import Any

from ferry.cli.cmd_ls import escape_name
from ferry.core.errors import UsageError


def register(sub: Any) -> None:
    p = sub.add_parser(
        "sites",
        help="manage saved sites (NAME:path shortcuts)",
        description=(
            "Save a base address under a short name, then write NAME:path anywhere an address is "
            "expected. Settings are kept in sites.toml in Ferry's config folder; passwords only in "
            "the system keychain."
        ),
    )
    # Bare "ferry sites" lists them, as "git remote" does.
    p.set_defaults(handler=run_list, json=False)
    ss = p.add_subparsers(dest="sites_command", metavar="ACTION", parser_class=type(p))

    add = ss.add_parser(
        "add",
        help="save a site",
        description="Save ADDRESS (a local path, sftp://, s3://, globus:// or memory:// URL) as NAME.",
    )
    add.add_argument("name", metavar="NAME", help="2-64 letters, digits, '_', '.', '@' or '-'")
    add.add_argument("address", metavar="ADDRESS", help="the site's base address")
    add.add_argument("--description", default="", metavar="TEXT", help="a note shown by 'sites list'")
    add.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a backend setting such as endpoint_url, region or identity_file (repeatable; never a secret)",
    )
    add.add_argument(
        "--globus-collection",
        metavar="UUID",
        help="the Globus collection serving this SSH or S3 site's storage: a job between two such sites "
        "(or this site and a collection) can go as one Globus task (see docs/globus.md)",
    )
    add.add_argument(
        "--globus-path",
        metavar="SITE_PATH=COLLECTION_PATH",
        help="where the site's paths are on the collection, e.g. /home/me=/~/ (default: the same paths on "
        "SSH, the relative ones under /~/; /BUCKET/KEY on S3)",
    )
    add.add_argument(
        "--password",
        action="store_true",
        help="ask for a password (not echoed) and keep it in the system keychain",
    )
    add.add_argument("--replace", action="store_true", help="overwrite a site with the same name")
    add.set_defaults(handler=run_add)

    ls = ss.add_parser("list", help="show saved sites", description="Show the saved sites.")
    ls.add_argument("--json", action="store_true", help="print a JSON array")
    ls.set_defaults(handler=run_list)

    rm = ss.add_parser(
        "remove",
        help="forget a site",
        description="Forget a saved site and its stored password. No files are touched.",
    )
    rm.add_argument("name", metavar="NAME")
    rm.set_defaults(handler=run_remove)


def parse_options(items: list[str]) -> dict[str, str]:
    options: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UsageError(f"Malformed --option {item!r} (expected KEY=VALUE)")
        if key in options:
            raise UsageError(f"--option {key} given twice")
        options[key] = value
    return options


def run_add(args: argparse.Namespace) -> int:
    from ferry.credentials import keychain
    from ferry.credentials.sites import (
        GLOBUS_COLLECTION,
        GLOBUS_PATH,
        Site,
        SiteStore,
        globus_link,
        normalize_address,
        validate_name,
    )

    # Check everything before asking for a password, so a typo does not cost a prompt.
    validate_name(args.name)
    normalize_address(args.address)
    options = parse_options(args.option)
    for key, value in ((GLOBUS_COLLECTION, args.globus_collection), (GLOBUS_PATH, args.globus_path)):
        if value is not None:
            if key in options:
                raise UsageError(f"--option {key} and --{key.replace('_', '-')} given together")
            options[key] = value
    globus_link(Site(args.name, normalize_address(args.address), options=options))
    store = SiteStore()
    if not args.replace and store.get(args.name) is not None:
        raise UsageError(f"A site named '{args.name}' already exists; use --replace to change it")

    password: str | None = None
    if args.password:
        if keychain.keychain_available():
            password = getpass.getpass(f"Password for site '{args.name}' (not shown): ")
            if not password:
                raise UsageError("Empty password: nothing saved (leave out --password to save no password)")
        else:
            sys.stderr.write(
                f"ferry: {keychain.keychain_reason()}, so no password was asked for or stored "
                "(Ferry asks for it when it connects).\n"
            )

    site = store.add(args.name, args.address, options, replace=args.replace, description=args.description.strip())
    sys.stdout.write(f"Saved site '{site.name}': {escape_name(site.address)}  (use it as {site.name}:path)\n")

    if password is not None:
        key = keychain.site_secret_key(site.name)
        if keychain.set_secret(key, password):
            sys.stdout.write("Password stored in the system keychain.\n")
        else:
            # The keychain broke between the check and the write; drop the copy set_secret kept in
            # memory, since this process ends now and no-one could use it.
            keychain.delete_secret(key)
            sys.stderr.write(f"ferry: {keychain.keychain_reason()}, so the password was not stored.\n")
            return 1
    return 0


def _password_state(name: str) -> bool | None:
    """Whether a password is stored for the site; None if there is no keychain to ask."""
    from ferry.credentials import keychain

    if not keychain.keychain_available():
        return None
    return keychain.has_secret(keychain.site_secret_key(name))


def run_list(args: argparse.Namespace) -> int:
    from ferry.credentials import keychain
    from ferry.credentials.sites import SiteStore

    sites = SiteStore().list()
    if args.json:
        out = [{**site.to_json(), "password_stored": _password_state(site.name)} for site in sites]
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not sites:
        sys.stdout.write("No saved sites. Add one with: ferry sites add NAME ADDRESS\n")
        return 0
    header = ("NAME", "ADDRESS", "PASSWORD", "OPTIONS", "DESCRIPTION")
    rows = [header]
    for site in sites:
        state = _password_state(site.name)
        rows.append(
            (
                escape_name(site.name),
                escape_name(site.address),
                "stored" if state else ("-" if state is False else "no keychain"),
                escape_name(", ".join(f"{k}={v}" for k, v in site.options.items())) or "-",
                escape_name(site.description),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    for row in rows:
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=False)] + [row[-1]]
        sys.stdout.write("  ".join(cells).rstrip() + "\n")
    if not keychain.keychain_available():
        sys.stderr.write(f"ferry: note: {keychain.keychain_reason()}, so no passwords are stored.\n")
    return 0


def run_remove(args: argparse.Namespace) -> int:
    from ferry.credentials import keychain
    from ferry.credentials.sites import SiteStore

    site = SiteStore().remove(args.name)
    had_password = keychain.delete_secret(keychain.site_secret_key(site.name))
    extra = " and its stored password" if had_password else ""
    sys.stdout.write(f"Removed site '{site.name}'{extra} ({escape_name(site.address)}); no files were touched.\n")
    return 0
