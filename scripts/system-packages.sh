#!/usr/bin/env bash
# Debian/Ubuntu packages the test suite needs, installed only when missing (so a developer's
# second run costs nothing). Uses sudo when not root. Later backends add their servers here
# (Qt's xcb libraries and Xvfb for the GUI).
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
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
