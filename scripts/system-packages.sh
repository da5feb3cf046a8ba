#!/usr/bin/env bash
# Debian/Ubuntu packages Ferry needs, installed only when missing (so a second run costs nothing).
# Uses sudo when not root.
#   scripts/system-packages.sh        everything the test suite needs (CI, scripts/test.sh)
#   scripts/system-packages.sh app    only what the desktop window needs to start (scripts/run.sh)
set -euo pipefail
mode=${1:-test}
need=()
want=()
have_pkg() { dpkg -s "$1" >/dev/null 2>&1; }
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
# Qt's xcb platform plug-in and fonts (without fonts every glyph is a box; see the stack notes).
for pkg in libxcb-icccm4 libxcb-keysyms1 libxcb-cursor0 libxkbcommon-x11-0 libegl1 libgl1 libdbus-1-3 \
  libglib2.0-0 fontconfig fonts-dejavu-core libxcb-shape0 libxcb-randr0 libxcb-render-util0 libxcb-image0 \
  libxcb-xkb1 libxkbcommon0; do
  have_pkg "$pkg" || need+=("$pkg")
done
if [ "$mode" = "test" ]; then
  command -v sha256sum >/dev/null || need+=(coreutils)
  command -v mount >/dev/null || need+=(mount)
  # SFTP tests start their own OpenSSH sshd (tests/sshd.py) and check it with ssh/sftp.
  # On a systemd machine the package also starts the system sshd on port 22 (tests never use it):
  # `sudo systemctl disable --now ssh` if unwanted.
  [ -x /usr/sbin/sshd ] || need+=(openssh-server)
  command -v sftp >/dev/null || need+=(openssh-client)
  # The server-side BLAKE3 check for `--verify blake3` uploads (tests/sftp/test_cli_sftp.py):
  # optional (installed below on its own, so a distribution without it fails nothing).
  command -v b3sum >/dev/null || want+=(b3sum)
  # A real second factor behind sshd's PAM for the 2FA tests (TOTP codes computed by the test).
  have_pkg libpam-google-authenticator || need+=(libpam-google-authenticator)
  # A virtual screen for the screenshots and the bundle's window check; real input events and
  # screen dumps for the window's end-to-end test (tests/ui/test_xvfb_end_to_end.py).
  for pkg in xvfb xauth xdotool x11-apps; do have_pkg "$pkg" || need+=("$pkg"); done
  # Validators for the Linux desktop entry and AppStream metadata (tests/packaging).
  command -v desktop-file-validate >/dev/null || need+=(desktop-file-utils)
  command -v appstreamcli >/dev/null || need+=(appstream)
fi
if [ ${#need[@]} -eq 0 ] && [ ${#want[@]} -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "Ferry: please install these (Debian package names): ${need[*]}${want[*]:+ (optional: ${want[*]})}" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "Installing system packages: ${need[*]}${want[*]:+ (optional: ${want[*]})}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
if [ ${#need[@]} -gt 0 ]; then
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
if [ ${#want[@]} -gt 0 ]; then
  $SUDO apt-get install -y -qq --no-install-recommends "${want[@]}" || echo "Ferry: optional packages not installed: ${want[*]}" >&2
fi
