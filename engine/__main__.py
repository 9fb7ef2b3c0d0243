"""`python3 -m engine`: the engine process (see server.py and docs/engine-protocol.md)."""

import sys

from .server import main

sys.exit(main())
