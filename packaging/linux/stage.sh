#!/bin/sh
# Lay Ferry's desktop integration into a built bundle folder: share/ (menu entry, AppStream file,
# icons, laid out like /usr/share) and install.sh. build.sh calls it; tests call it on a stand-in.
# Usage: packaging/linux/stage.sh BUNDLE_DIR
set -eu
BUNDLE=${1:?usage: stage.sh BUNDLE_DIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
APP_ID=io.github.ferry.Ferry
SHARE=$BUNDLE/share
rm -rf "$SHARE"
mkdir -p "$SHARE/applications" "$SHARE/metainfo" "$SHARE/icons/hicolor/scalable/apps"
cp "$ROOT/packaging/linux/$APP_ID.desktop" "$SHARE/applications/"
cp "$ROOT/packaging/linux/$APP_ID.metainfo.xml" "$SHARE/metainfo/"
cp "$ROOT/resources/icons/ferry.svg" "$SHARE/icons/hicolor/scalable/apps/$APP_ID.svg"
for size in 16 22 24 32 48 64 128 256 512; do
    mkdir -p "$SHARE/icons/hicolor/${size}x${size}/apps"
    cp "$ROOT/resources/icons/png/ferry-$size.png" "$SHARE/icons/hicolor/${size}x${size}/apps/$APP_ID.png"
done
cp "$ROOT/packaging/linux/install.sh" "$BUNDLE/install.sh"
chmod 0755 "$BUNDLE/install.sh"
