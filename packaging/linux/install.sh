#!/bin/sh
# Put Ferry (this unpacked bundle) on your PATH and in your desktop's application menu.
#
#   ./install.sh                 for you only: ~/.local/bin/ferry and ~/.local/share/...
#   sudo ./install.sh --system   for everyone: /usr/local/bin/ferry and /usr/local/share/...
#   ./install.sh --uninstall     remove what the same command installed (the bundle folder stays)
#   ./install.sh --handle-sftp   also make Ferry the default for sftp:// links (ferry:// and
#                                s3:// links always open in Ferry; sftp:// is left to your file
#                                manager unless you ask, because many desktops handle it already)
#
# Nothing is copied out of this folder except the menu entry, the icons and the AppStream file:
# the command is a link to ./ferry here, so keep this folder where it is (e.g. ~/.local/opt/).
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
APP_ID=io.github.ferry.Ferry
PREFIX="${XDG_DATA_HOME:-$HOME/.local/share}"
BIN="$HOME/.local/bin"
MODE=install
HANDLE_SFTP=no
for arg in "$@"; do
    case "$arg" in
        --system) PREFIX=/usr/local/share; BIN=/usr/local/bin ;;
        --uninstall) MODE=uninstall ;;
        --handle-sftp) HANDLE_SFTP=yes ;;
        -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
    esac
done

if [ ! -x "$HERE/ferry" ]; then
    echo "install.sh: run me from the unpacked Ferry folder (no ferry program next to me in $HERE)" >&2
    exit 2
fi

refresh() {
    # Menus and icon caches pick the change up now instead of at the next login, where the tools exist.
    command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database -q "$PREFIX/applications" || true
    command -v gtk-update-icon-cache >/dev/null 2>&1 && gtk-update-icon-cache -q -t "$PREFIX/icons/hicolor" || true
}

if [ "$MODE" = uninstall ]; then
    [ -L "$BIN/ferry" ] && rm -f "$BIN/ferry"
    rm -f "$PREFIX/applications/$APP_ID.desktop" "$PREFIX/metainfo/$APP_ID.metainfo.xml"
    for icon in "$PREFIX"/icons/hicolor/*/apps/$APP_ID.png "$PREFIX/icons/hicolor/scalable/apps/$APP_ID.svg"; do
        [ -e "$icon" ] && rm -f "$icon"
    done
    refresh
    echo "Ferry removed from the menu and from $BIN. Delete $HERE yourself if you no longer want it."
    exit 0
fi

mkdir -p "$BIN" "$PREFIX/applications" "$PREFIX/metainfo" "$PREFIX/icons/hicolor/scalable/apps"
ln -sfn "$HERE/ferry" "$BIN/ferry"

# The menu entry runs this bundle by its full path, so it works even where ~/.local/bin is not
# on the desktop session's PATH.
sed -e "s|^Exec=ferry |Exec=\"$HERE/ferry\" |" -e "s|^TryExec=ferry$|TryExec=$HERE/ferry|" \
    "$HERE/share/applications/$APP_ID.desktop" > "$PREFIX/applications/$APP_ID.desktop"
cp "$HERE/share/metainfo/$APP_ID.metainfo.xml" "$PREFIX/metainfo/"
cp "$HERE/share/icons/hicolor/scalable/apps/$APP_ID.svg" "$PREFIX/icons/hicolor/scalable/apps/"
for dir in "$HERE"/share/icons/hicolor/*x*; do
    size=$(basename "$dir")
    mkdir -p "$PREFIX/icons/hicolor/$size/apps"
    cp "$dir/apps/$APP_ID.png" "$PREFIX/icons/hicolor/$size/apps/"
done
refresh

if command -v xdg-mime >/dev/null 2>&1; then
    xdg-mime default "$APP_ID.desktop" x-scheme-handler/ferry x-scheme-handler/s3 || true
    [ "$HANDLE_SFTP" = yes ] && { xdg-mime default "$APP_ID.desktop" x-scheme-handler/sftp || true; }
fi

echo "Ferry is installed: '$BIN/ferry' and 'Ferry' in your applications menu."
case ":$PATH:" in
    *":$BIN:"*) ;;
    *) echo "Note: $BIN is not on your PATH; add it (e.g. in ~/.profile) to type 'ferry' in a terminal." ;;
esac
echo "Check it with: ferry --selftest"
