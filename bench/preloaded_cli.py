"""core.train's CLI in a process that imported what the app's fork server preloads before the go.

    python bench/preloaded_cli.py [core.train flags]     # prints "ready", trains once a line arrives

The page's Start forks its trainer from the app's fork server, which imported torch, torch._dynamo
(Adam's first construction imports it) and the trainer's modules when the app started
(app/forkserver.py PRELOAD): a trainer started that way pays none of them. bench_speed.py --launch app
times from the go, so its start-up is the one a Start on the page has.
"""
from __future__ import annotations

import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    from app.forkserver import PRELOAD
    for name in PRELOAD:
        importlib.import_module(name)
    print("ready", flush=True)
    sys.stdin.readline()
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)   # the bench reads "ready" only: the trainer's lines go nowhere
    from core import train
    return train.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
