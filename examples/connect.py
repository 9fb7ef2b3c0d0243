"""Where the examples find the server and a key, the way `npm run cli` does: --url / --key, else the
AGENT_TRAINER_URL / API_KEY environment variables, else http://127.0.0.1:8000 and the bootstrap key that
`npm start` wrote to data/bootstrap-api-key. Also the two helpers every example shares: the argument parser
they start from, and a JSON summary file (--summary) that the smoke tests and the benchmark read."""

import argparse
import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_BASE_MODEL = "builtin/smollm2-135m-instruct"


def default_key() -> str | None:
    if os.environ.get("API_KEY"):
        return os.environ["API_KEY"]
    key_file = Path(os.environ.get("DATA_DIR", REPO / "data")) / "bootstrap-api-key"
    return key_file.read_text().strip() if key_file.exists() else None


def parser(description: str) -> argparse.ArgumentParser:
    """The options every example takes; each adds its own."""
    cli = argparse.ArgumentParser(description=description)
    cli.add_argument(
        "--url",
        default=os.environ.get("AGENT_TRAINER_URL", "http://127.0.0.1:8000"),
        help="the server's root URL (no /v1)",
    )
    cli.add_argument("--key", default=default_key(), help="an API key (default: API_KEY, else data/bootstrap-api-key)")
    cli.add_argument("--summary", help="also write the figures this run printed to this JSON file")
    return cli


def parse(cli: argparse.ArgumentParser) -> argparse.Namespace:
    args = cli.parse_args()
    if not args.key:
        cli.error(
            "no API key: pass --key, set API_KEY, or start the server with `npm start` (it writes data/bootstrap-api-key)"
        )
    args.url = args.url.rstrip("/")
    return args


def write_summary(args: argparse.Namespace, summary: dict) -> None:
    if args.summary:
        Path(args.summary).write_text(json.dumps(summary, indent=2) + "\n")
