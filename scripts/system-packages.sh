#!/usr/bin/env bash
# Debian/Ubuntu packages the test suite needs, installed only when missing (so a developer's
# second run costs nothing). Uses sudo when not root. Later backends add their servers here

set -euo pipefail
need=()
command -v sha256sum >/dev/null || need+=(coreutils)
command -v mount >/dev/null || need+=(mount)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
# SFTP tests start their own OpenSSH sshd (tests/sshd.py) and check it with ssh/sftp.
# On a systemd machine the package also starts the system sshd on port 22 (tests never use it):
# `sudo systemctl disable --now ssh` if unwanted.
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v sftp >/dev/null || need+=(openssh-client)
# A real second factor behind sshd's PAM for the 2FA tests (TOTP codes computed by the test).
[ -e /lib/x86_64-linux-gnu/security/pam_google_authenticator.so ] || [ -e /usr/lib/security/pam_google_authenticator.so ] \
  || dpkg -s libpam-google-authenticator >/dev/null 2>&1 || need+=(libpam-google-authenticator)
# Qt's xcb platform under Xvfb (screenshots), fonts so glyphs are not boxes (see stack notes).
for pkg in xvfb xauth libxcb-icccm4 libxcb-keysyms1 libxcb-cursor0 libxkbcommon-x11-0 libegl1 libgl1 \
  libdbus-1-3 libglib2.0-0 fontconfig fonts-dejavu-core libxcb-shape0 libxcb-randr0 libxcb-render-util0 \
  libxcb-image0 libxcb-xkb1 libxkbcommon0; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
# Validators for the Linux desktop entry and AppStream metadata (tests/packaging).
command -v desktop-file-validate >/dev/null || need+=(desktop-file-utils)
command -v appstreamcli >/dev/null || need+=(appstream)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
