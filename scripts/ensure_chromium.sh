#!/usr/bin/env bash
# Debian's chromium for the viewer's browser test (tests/view): installed with apt when it is
# missing and we are root; otherwise one line says what to do (the test then skips, naming why).
# Quiet and quick when chromium is already there. Never downloads a browser build of its own.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "note: chromium is missing and cannot be installed here (needs root and apt-get);" \
       "the viewer's browser test will be skipped. Install it with: sudo apt-get install chromium" >&2
  exit 0
fi
echo "installing chromium with apt-get (for the viewer's browser test)" >&2
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq chromium; } >/tmp/ensure_chromium.log 2>&1; then
  echo "error: apt-get install chromium failed; see /tmp/ensure_chromium.log" >&2
  exit 1
fi
command -v chromium >/dev/null 2>&1 || { echo "error: chromium installed but not on PATH" >&2; exit 1; }
