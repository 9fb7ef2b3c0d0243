"""How frames reach the engine: stdio or TCP connections, and the engine's log lines on stderr.

Owns: framing (4-byte big-endian length + UTF-8 JSON, NaN and inf as null),
the frame writer shared by the threads, the read loop of one connection, and
TCP serving one connection at a time with the shared secret of the first frame.

Refuses to know: what a frame means (server.py's Engine handles each one).
"""

from __future__ import annotations

import hmac
import json
import math
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import BinaryIO, Protocol


class Engine(Protocol):
    """What the transport needs of the engine (server.py's Engine has it): no import of server.py, so no circle."""

    send: Callable[[dict], None]

    def handle(self, msg) -> None: ...

    def error(self, rid, exc: BaseException) -> None: ...

    def cancel_all(self) -> None: ...


MAX_FRAME = 512 * 1024 * 1024


def log(msg: str) -> None:
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} engine: {msg}\n")
    sys.stderr.flush()


def _finite(obj):
    """JSON has no NaN/inf: they become null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def encode_frame(obj: dict) -> bytes:
    try:
        data = json.dumps(obj, allow_nan=False, separators=(",", ":"))
    except ValueError:
        data = json.dumps(_finite(obj), separators=(",", ":"))
    raw = data.encode("utf-8")
    return struct.pack(">I", len(raw)) + raw


def read_exact(stream: BinaryIO, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        piece = stream.read(min(n - got, 1 << 20))
        if not piece:
            return None
        chunks.append(piece)
        got += len(piece)
    return b"".join(chunks)


class FrameWriter:
    def __init__(self, stream: BinaryIO):
        self.stream, self.lock, self.broken = stream, threading.Lock(), False

    def __call__(self, obj: dict) -> None:
        data = encode_frame(obj)
        with self.lock:
            if self.broken:
                return
            try:
                self.stream.write(data)
                self.stream.flush()
            except (OSError, ValueError):
                self.broken = True  # peer gone; the reader sees EOF and shuts down


def serve_stream(engine: Engine, rfile: BinaryIO, wfile: BinaryIO, ready: dict) -> None:
    """Read frames until EOF; replies go to wfile."""
    writer = FrameWriter(wfile)
    engine.send = writer
    writer(ready)
    while True:
        head = read_exact(rfile, 4)
        if head is None:
            return
        (length,) = struct.unpack(">I", head)
        if length > MAX_FRAME:
            engine.error(None, ValueError(f"frame of {length} bytes exceeds {MAX_FRAME}"))
            if read_exact(rfile, length) is None:  # skip it to stay in sync
                return
            continue
        body = read_exact(rfile, length)
        if body is None:
            return
        try:
            msg = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            engine.error(None, ValueError(f"frame is not valid UTF-8 JSON: {e}"))
            continue
        engine.handle(msg)


def authenticate(rfile: BinaryIO, wfile: BinaryIO, secret: str) -> bool:
    """A TCP connection's first frame must be {id, op: "auth", secret}; anything else is refused and closed."""
    head = read_exact(rfile, 4)
    length = struct.unpack(">I", head)[0] if head is not None else 0
    msg = None
    if 0 < length <= 64 * 1024:
        body = read_exact(rfile, length)
        try:
            msg = json.loads(body.decode("utf-8")) if body is not None else None
        except (UnicodeDecodeError, ValueError):
            msg = None
    rid = msg.get("id") if isinstance(msg, dict) and isinstance(msg.get("id"), str) else None
    given = msg.get("secret") if isinstance(msg, dict) and msg.get("op") == "auth" else None
    ok = isinstance(given, str) and hmac.compare_digest(given.encode("utf-8"), secret.encode("utf-8"))
    reply = (
        {"id": rid, "done": True, "authenticated": True}
        if ok
        else {"id": rid, "done": True, "error": {"code": "unauthorized", "message": "wrong or missing engine secret"}}
    )
    try:
        wfile.write(encode_frame(reply))
        wfile.flush()
    except OSError:
        return False
    return ok


def serve_tcp(engine: Engine, address: str, secret: str | None, ready: dict) -> None:
    """One connection at a time; with a secret, a connection is served only after its auth frame."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if secret is None and host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"refusing to listen on {host} without ENGINE_SECRET: anyone could drive the engine")
    srv = socket.create_server((host, int(port)))
    bound = srv.getsockname()
    log(f"listening on {bound[0]}:{bound[1]}" + (" (secret required)" if secret else ""))
    while True:
        conn, peer = srv.accept()
        log(f"connection from {peer}")
        _keepalive(conn)
        with conn, conn.makefile("rb") as rf, conn.makefile("wb") as wf:
            if secret is not None:
                conn.settimeout(10.0)  # a silent client must not hold the only connection
                try:
                    accepted = authenticate(rf, wf, secret)
                except OSError:
                    accepted = False
                if not accepted:
                    log(f"refused {peer}: wrong or missing secret")
                    continue
                conn.settimeout(None)
            serve_stream(engine, rf, wf, ready)
        engine.cancel_all()  # nobody is left to read their tokens


def _keepalive(conn: socket.socket) -> None:
    """A peer gone without a FIN (a host or network failure) frees the only connection within about a minute."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, name):  # Linux; elsewhere the system defaults apply
            conn.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
