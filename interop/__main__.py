"""`python -m interop [PATTERN] [--url URL] [--target URL]`: print scenarios' normalised observations
(one broker), or compare two brokers — for writing and debugging scenarios without pytest."""

from __future__ import annotations

import argparse
import fnmatch

from interop.registry import load_all
from interop.runner import dump, run_once, run_pair


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m interop")
    ap.add_argument("pattern", nargs="?", default="*", help="glob on area/name, e.g. 'routing/*'")
    ap.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/%2F", help="reference broker")
    ap.add_argument("--target", help="also run on this broker and show differences")
    a = ap.parse_args()
    scs = [s for i, s in load_all().items() if fnmatch.fnmatch(i, a.pattern)]
    agree = 0
    for sc in scs:
        if a.target:
            o = run_pair(sc, a.url, a.target, same_broker=a.url == a.target)
            agree += o.agree
            print(f"{'AGREE   ' if o.agree else 'DISAGREE'} {sc.id} ({o.seconds:.2f}s)")
            if not o.agree:
                print(o.message)
        else:
            print(f"== {sc.id}\n{dump(run_once(sc, a.url))}")
    if a.target:
        print(f"interop: {len(scs)} scenarios, {agree} agree")


if __name__ == "__main__":
    main()
