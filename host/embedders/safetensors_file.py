"""Read the tensors of a `.safetensors` file with numpy alone (no torch, no `safetensors` package).

The format: an 8-byte little-endian header length, a JSON header mapping each tensor name to its
dtype, shape and [begin, end) byte offsets into the data that follows. Tensors come back as
read-only numpy views of the given bytes (no copy), in native little-endian order.
"""

from __future__ import annotations

import json
import struct

import numpy as np

_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4", "I8": "i1", "U8": "u1"}


def read_safetensors(data: bytes) -> dict[str, np.ndarray]:
    """Every tensor in `data` (the bytes of a .safetensors file) by name; ValueError if malformed."""
    if len(data) < 8:
        raise ValueError("not a safetensors file: shorter than its 8-byte header length")
    (header_length,) = struct.unpack("<Q", data[:8])
    if header_length > len(data) - 8:
        raise ValueError(f"not a safetensors file: header length {header_length} exceeds the file")
    try:
        header = json.loads(data[8 : 8 + header_length])
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"not a safetensors file: bad JSON header ({error})") from None
    if not isinstance(header, dict):
        raise ValueError("not a safetensors file: the header is not a JSON object")
    start = 8 + header_length
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = np.dtype(_DTYPES[entry["dtype"]])
            shape = tuple(int(size) for size in entry["shape"])
            begin, end = (int(offset) for offset in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"safetensors header: bad entry for tensor {name!r}") from None
        count = int(np.prod(shape, dtype=np.int64))
        if end - begin != count * dtype.itemsize or begin < 0 or start + end > len(data):
            raise ValueError(f"safetensors header: offsets of tensor {name!r} do not fit its shape or the file")
        tensors[name] = np.frombuffer(data, dtype=dtype, count=count, offset=start + begin).reshape(shape)
    return tensors
