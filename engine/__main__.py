"""`python3 -m engine`: the engine process (see cli.py, server.py and docs/engine-protocol.md)."""

import sys

from .cli import main

sys.exit(main())
