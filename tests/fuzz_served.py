"""The longer schemathesis run, over HTTP against a served longmem (the real Serve app and LLM).

    python -m tests.fuzz_served [--examples N]                 # starts the real app on a temp dir
    python -m tests.fuzz_served --url URL --key KEY [--examples N]

Every operation, positive and negative cases with the key, positive cases without one. Prints
the figures and every distinct failure; exits 1 on any 5xx, schema violation or operation
reachable without a key. Against a server you care about, use a tenant made for this: the run
stores, forgets and erases at random in that tenant.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import schemathesis

from tests import fuzzing
from tests.serve_app import ADMIN_KEY, free_port, serve_settings


def _run(url: str, key: str, examples: int) -> int:
    config = schemathesis.Config.from_dict({"generation": {"with-security-parameters": False}})
    schema = schemathesis.openapi.from_url(f"{url.rstrip('/')}/openapi.json", config=config)
    failed = 0
    for label, run in (
        ("with a key", fuzzing.with_key(schema, {"Authorization": f"Bearer {key}"}, examples, timeout=900)),
        ("without a key", fuzzing.without_key(schema, examples, timeout=900)),
    ):
        print(run.report(label), flush=True)
        for name, curl in run.failures.items():
            print(f"  FAILED {name}\n    {curl}")
        failed += len(run.failures) + run.statuses["5xx"] + run.statuses["no answer"]
    return 1 if failed else 0


def main() -> None:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server (default: start the real app on a temp dir)")
    parser.add_argument("--key", help="an API key of that server (required with --url)")
    parser.add_argument("--examples", type=int, default=100, help="cases per operation and mode")
    args = parser.parse_args()
    if args.url:
        if not args.key:
            parser.error("--url needs --key")
        sys.exit(_run(args.url, args.key, args.examples))

    from deployments.app import start, stop

    with tempfile.TemporaryDirectory(prefix="longmem-fuzz-") as tmp:
        settings = serve_settings(Path(tmp) / "data", free_port())
        running = start(settings)
        try:
            code = _run(running.url, ADMIN_KEY, args.examples)
        finally:
            stop(settings)
    sys.exit(code)


if __name__ == "__main__":
    main()
