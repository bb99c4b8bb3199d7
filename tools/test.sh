#!/usr/bin/env bash
# Set up and run the whole test suite on a fresh machine (the README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -r requirements-dev.txt
# The browser test drives Debian's chromium; a Playwright browser download is not needed.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  (apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; }) \
    || echo "chromium could not be installed: the browser test will be skipped"
fi
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1
python3 -m pytest -q --durations=15 "$@"
