"""The no-op HTTP task handler of ``tenure bench``'s shim rows: every POST is answered
``{"outcome": "complete"}`` at once, over kept-alive HTTP/1.1 connections, so the bench
measures ``tenure task worker --http`` and nothing else.

Run as ``python -m tenure.bench.shim_handler``: it prints its port on the first line of its
stdout, then serves until it is terminated.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

BODY = b'{"outcome": "complete"}'
ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(BODY)).encode()
    + b"\r\n\r\n"
    + BODY
)


async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if length:
                await reader.readexactly(length)
            writer.write(ANSWER)
            await writer.drain()
    writer.close()


async def serve() -> None:
    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    sys.exit(0)
