#!/usr/bin/env bash
# Build Ferry's Linux bundle: dist/ferry/ (one folder, run dist/ferry/ferry) and
# dist/ferry-VERSION-linux-ARCH.tar.gz, print its size and file count, then run its --selftest.
#
# Usage: packaging/build.sh [--out DIR] [--no-selftest]
#   --out DIR       put dist/ and the PyInstaller work folder under DIR instead of the repository
#   --no-selftest   skip running the bundle's self-test at the end
# PYTHON=/path/to/python picks the interpreter (default: the repository's .venv).
#
# Build on the oldest Linux you support: the bundle carries the build machine's libc
# requirements (PySide6 wheels already need glibc 2.34 or later).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$ROOT
SELFTEST=yes
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT=$(mkdir -p "$2" && cd "$2" && pwd); shift 2 ;;
        --no-selftest) SELFTEST=no; shift ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
    esac
done
PY=${PYTHON:-$ROOT/.venv/bin/python}
if ! "$PY" -c "import PyInstaller" 2>/dev/null; then
    echo "build.sh: PyInstaller is not installed for $PY; install it with: $PY -m pip install -e '$ROOT[package]'" >&2
    exit 2
fi

VERSION=$("$PY" -c "import sys; sys.path.insert(0, '$ROOT/packaging'); import bundle_meta; print(bundle_meta.version())")
ARCH=$(uname -m)
DIST=$OUT/dist
BUNDLE=$DIST/ferry
TARBALL=$DIST/ferry-$VERSION-linux-$ARCH.tar.gz

echo "== PyInstaller: Ferry $VERSION for linux-$ARCH into $BUNDLE"
start=$(date +%s)
"$PY" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath "$DIST" --workpath "$OUT/build/pyinstaller" "$ROOT/packaging/ferry.spec"

# Desktop integration travels inside the bundle, laid out like /usr/share, for install.sh.
sh "$ROOT/packaging/linux/stage.sh" "$BUNDLE"
# The window looks for resources/ two folders above its package (the source-tree layout), which
# in the bundle is here, beside _internal/: a link keeps one copy.
ln -sfn _internal/resources "$BUNDLE/resources"

echo "== archive: $TARBALL"
# Sorted, owner-less and dated by the last commit so the same tree gives the same archive.
EPOCH=$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || date +%s)
tar -C "$DIST" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$EPOCH" \
    --transform "s,^ferry,ferry-$VERSION," -cf - ferry | gzip -n -6 > "$TARBALL.tmp"
mv "$TARBALL.tmp" "$TARBALL"

FILES=$(find "$BUNDLE" -type f | wc -l)
BYTES=$(du -sb "$BUNDLE" | cut -f1)
TARBYTES=$(stat -c %s "$TARBALL")
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "== built in $(( $(date +%s) - start )) s"
echo "bundle:  $BUNDLE  $(mib "$BYTES") in $FILES files"
echo "archive: $TARBALL  $(mib "$TARBYTES")"
if command -v objdump >/dev/null; then
    # The newest glibc symbol any file asks for: the oldest Linux this bundle can run on.
    GLIBC=$(find "$BUNDLE" -type f \( -name '*.so*' -o -name ferry \) -exec objdump -T {} + 2>/dev/null \
        | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -t. -k1,1n -k2,2n -u | tail -1)
    echo "needs:   glibc $GLIBC or newer (build on an older distribution to reach older systems)"
fi

if [ "$SELFTEST" = yes ]; then
    echo "== $BUNDLE/ferry --selftest"
    "$BUNDLE/ferry" --selftest
fi
