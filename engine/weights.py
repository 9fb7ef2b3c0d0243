"""Safetensors files and HF checkpoint folders, read and written by hand.

Owns: the safetensors byte layout (8-byte little-endian header length, JSON
header, raw little-endian buffers), the sharded `model.safetensors.index.json`
convention, and atomic file writes (temp file in the same folder + os.replace).

Refuses to know: what any tensor means. Names go in and out unchanged; mapping
HF names onto modules is model.py's job, PEFT names are lora.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import tempfile
from collections.abc import Callable, Iterator

import torch

# Only the dtypes checkpoints for these model families use; anything else is
# refused loudly rather than guessed.
DTYPES: dict[str, torch.dtype] = {
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in DTYPES.items()}
ITEMSIZE: dict[str, int] = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1}

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
# A header above this is certainly corrupt; refusing it avoids a huge alloc.
MAX_HEADER_BYTES = 100 * 1024 * 1024


def read_header(path: str) -> tuple[dict[str, dict], dict[str, str], int]:
    """Return (tensor entries, __metadata__, byte offset of the data section)."""
    with open(path, "rb") as f:
        raw_len = f.read(8)
        if len(raw_len) != 8:
            raise ValueError(f"{path}: not a safetensors file (too short)")
        (header_len,) = struct.unpack("<Q", raw_len)
        size = os.fstat(f.fileno()).st_size
        if header_len > size - 8:
            raise ValueError(f"{path}: header length {header_len} runs past the file ({size} bytes): not safetensors")
        if header_len > MAX_HEADER_BYTES:
            raise ValueError(f"{path}: safetensors header of {header_len} bytes is implausible")
        header = json.loads(f.read(header_len).decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError(f"{path}: safetensors header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    return header, metadata, 8 + header_len


def _decode(buf: bytearray, entry: dict, name: str, path: str) -> torch.Tensor:
    dtype_name = entry.get("dtype")
    if dtype_name not in DTYPES:
        raise ValueError(f"{path}: tensor {name} has unsupported dtype {dtype_name}")
    shape = [int(s) for s in entry["shape"]]
    numel = 1
    for s in shape:
        numel *= s
    if len(buf) != numel * ITEMSIZE[dtype_name]:
        raise ValueError(
            f"{path}: tensor {name} has {len(buf)} bytes, shape {shape} needs {numel * ITEMSIZE[dtype_name]}"
        )
    if numel == 0:
        return torch.empty(shape, dtype=DTYPES[dtype_name])
    # frombuffer shares memory with the bytearray we own: no second copy.
    flat = torch.frombuffer(buf, dtype=DTYPES[dtype_name])
    return flat.reshape(shape)


def iter_file(path: str, names: set | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (name, tensor) from one file, one tensor at a time (bounded memory)."""
    header, _, data_start = read_header(path)
    entries = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    with open(path, "rb") as f:
        for name, entry in entries:
            if names is not None and name not in names:
                continue
            begin, end = (int(x) for x in entry["data_offsets"])
            f.seek(data_start + begin)
            buf = bytearray(end - begin)
            if f.readinto(buf) != len(buf):
                raise ValueError(f"{path}: truncated data for tensor {name}")
            yield name, _decode(buf, entry, name, path)


def load_file(path: str) -> dict[str, torch.Tensor]:
    return dict(iter_file(path))


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# Read once: os.umask can only be read by setting it, which is not thread-safe later.
_FILE_MODE = 0o666 & ~_umask()


def _atomic_write(path: str, write: Callable) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes 0600 files; checkpoints are read by other tools and users (PEFT, vLLM).
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str, data: bytes) -> None:
    _atomic_write(path, lambda f: f.write(data))


def atomic_write_json(path: str, obj) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8"))


def atomic_torch_save(path: str, obj) -> None:
    _atomic_write(path, lambda f: torch.save(obj, f))


def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().to("cpu").contiguous()
    if t.numel() == 0:
        return b""
    # bf16 has no numpy dtype; reinterpreting the storage as int16 keeps the bits.
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16).numpy().tobytes()
    if t.dtype == torch.bool:
        return t.to(torch.uint8).numpy().tobytes()
    return t.numpy().tobytes()


def save_file(tensors: dict[str, torch.Tensor], path: str, metadata: dict[str, str] | None = None) -> None:
    """Write one safetensors file atomically; tensors keep their dtype."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype not in DTYPE_NAMES:
            raise ValueError(f"cannot save tensor {name} of dtype {t.dtype}")
        blob = _tensor_bytes(t)
        header[name] = {
            "dtype": DTYPE_NAMES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    # The format asks for the data section to start 8-byte aligned.
    header_bytes += b" " * ((8 - len(header_bytes) % 8) % 8)

    def write(f):
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for blob in blobs:
            f.write(blob)

    _atomic_write(path, write)


def checkpoint_files(folder: str) -> list[str]:
    """The safetensors files of an HF folder, sharded or not."""
    index_path = os.path.join(folder, INDEX_NAME)
    if os.path.exists(index_path):
        with open(index_path, encoding="utf-8") as f:
            index = json.load(f)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError(f"{index_path}: missing weight_map")
        shards = sorted(set(weight_map.values()))
        return [os.path.join(folder, s) for s in shards]
    single = os.path.join(folder, SINGLE_NAME)
    if os.path.exists(single):
        return [single]
    raise FileNotFoundError(f"{folder}: neither {SINGLE_NAME} nor {INDEX_NAME}")


def iter_checkpoint(folder: str) -> Iterator[tuple[str, torch.Tensor]]:
    for path in checkpoint_files(folder):
        yield from iter_file(path)


def save_checkpoint(tensors: dict[str, torch.Tensor], folder: str, max_shard_bytes: int | None = None) -> list[str]:
    """Write tensors as one file, or as shards plus an index when they exceed max_shard_bytes."""
    os.makedirs(folder, exist_ok=True)
    sizes = {n: t.numel() * t.element_size() for n, t in tensors.items()}
    total = sum(sizes.values())
    if max_shard_bytes is None or total <= max_shard_bytes:
        save_file(tensors, os.path.join(folder, SINGLE_NAME), {"format": "pt"})
        return [SINGLE_NAME]
    shards: list[dict[str, torch.Tensor]] = [{}]
    used = 0
    for name in sorted(tensors):
        if shards[-1] and used + sizes[name] > max_shard_bytes:
            shards.append({})
            used = 0
        shards[-1][name] = tensors[name]
        used += sizes[name]
    names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    weight_map = {}
    for shard, fname in zip(shards, names):
        save_file(shard, os.path.join(folder, fname), {"format": "pt"})
        weight_map.update({n: fname for n in shard})
    atomic_write_json(os.path.join(folder, INDEX_NAME), {"metadata": {"total_size": total}, "weight_map": weight_map})
    return names + [INDEX_NAME]
