#!/usr/bin/env bash
# Install Debian's chromium for the Web UI browser test (tests/test_browser.py), if it is missing.
# Idempotent; where it cannot install (not root, no apt-get) it says why and exits 0, and the
# test skips naming what is missing.
set -euo pipefail
CHROMIUM=/usr/bin/chromium

if [ -x "$CHROMIUM" ]; then
    echo "install-browser: $CHROMIUM is already installed"
    exit 0
fi
if [ "$EUID" -ne 0 ]; then
    echo "install-browser: skipped, not root; install chromium yourself to run the browser test"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-browser: skipped, no apt-get; install chromium yourself to run the browser test"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null
echo "install-browser: installed $("$CHROMIUM" --version 2>/dev/null || echo chromium)"
