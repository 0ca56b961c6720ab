"""A transport that hands what one turn of the event loop wrote to the kernel in one write.

uvicorn writes a response's headers as soon as the app starts it, and its body in a second write:
two send() calls. A replica killed between them (kill -9, the OOM killer, a crashed machine)
leaves a response that has headers and no body, which a load balancer has already begun to pass
on and can no longer retry elsewhere. Written together, an answer is either wholly in the kernel
(which still delivers it after the process dies) or not begun, and a balancer retries the latter.

Writes made during one turn of the loop are joined and passed on at the end of it (call_soon), so
flow control still works: the real transport sees the bytes, and pauses the writer, one turn later.
Closing passes on what is held first; aborting drops it, as aborting drops the transport's buffer.
"""

from __future__ import annotations

import asyncio
from typing import Any


class CoalescingTransport(asyncio.Transport):
    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._held:
            self._loop.call_soon(self._flush)
        self._held.append(bytes(data))

    def _flush(self) -> None:
        if self._held:
            data = b"".join(self._held)
            self._held.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held.clear()
        self._transport.abort()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(part) for part in self._held)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()
