"""Driving the async runtimes from synchronous code, so that one behaviour test runs
against both implementations of a runtime (``flavours``), not against a copy.

:class:`LoopThread` runs an event loop on a thread of its own; :class:`Blocking` is a
synchronous view of an async runtime on that loop: its methods and attributes are
called on the loop (coroutines are awaited there), ``with`` enters ``async with``.
The runtime itself runs as an async service would run it, on its event loop alone.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Self, TypeVar

import tenure.aio

T = TypeVar("T")
FLAVOURS = ("sync", "async")


class LoopThread:
    """An asyncio event loop on a daemon thread; ``run`` waits for a coroutine on it."""

    def __init__(self, name: str = "tenure-test-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, awaitable: Awaitable[T], timeout: float | None = None) -> T:
        async def wait() -> T:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(wait(), self.loop).result(timeout)

    def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``function(*args, **kwargs)`` on the loop's thread; an awaitable result is awaited."""
        if threading.current_thread() is self._thread:
            result = function(*args, **kwargs)
            assert not inspect.isawaitable(result), "await it: this is the loop's own thread"
            return result
        done: Future[T] = Future()

        async def on_loop() -> None:
            try:
                result = function(*args, **kwargs)
                if inspect.isawaitable(result):
                    result = await result
                done.set_result(result)
            except BaseException as error:  # handed to the caller's thread
                done.set_exception(error)

        self.loop.call_soon_threadsafe(lambda: self.loop.create_task(on_loop()))
        return done.result()

    def close(self) -> None:
        async def cancel_the_rest() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self.run(cancel_the_rest(), timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)
        self.loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Blocking:
    """A synchronous view of ``target``, an object of the async API living on ``loop``."""

    def __init__(self, target: Any, loop: LoopThread) -> None:
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "loop", loop)

    def __getattr__(self, name: str) -> Any:
        value = self.loop.call(getattr, self.target, name)
        if not callable(value) or inspect.isclass(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            result = self.loop.call(value, *args, **kwargs)
            return self if result is self.target else result

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        self.loop.call(setattr, self.target, name, value)

    def __enter__(self) -> Self:
        self.loop.call(self.target.__aenter__)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.loop.call(self.target.__aexit__, exc_type, exc, tb)


class Flavour:
    """Makes a runtime in one flavour: ``flavour(Elector, ...)`` is an ``Elector``, or, for
    "async", a :class:`Blocking` view of an ``AsyncElector`` made with the same arguments."""

    def __init__(self, name: str, loop: LoopThread | None) -> None:
        self.name = name
        self.loop = loop

    def __call__(self, runtime: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self.loop is None:
            return runtime(*args, **kwargs)
        twin = async_twin(runtime)
        return Blocking(self.loop.call(twin, *args, **kwargs), self.loop)  # type: ignore[return-value]

    @property
    def is_async(self) -> bool:
        return self.loop is not None


def async_twin(runtime: Callable[..., Any]) -> Callable[..., Any]:
    """The async class of ``tenure.aio`` that matches a sync runtime: Elector -> AsyncElector."""
    name = f"Async{getattr(runtime, '__name__', runtime)}"
    twin = getattr(tenure.aio, name, None)
    if twin is None:
        raise LookupError(f"tenure.aio has no {name}")
    return twin  # type: ignore[no-any-return]


@contextmanager
def flavour(name: str) -> Iterator[Flavour]:
    """The flavour ``name`` ("sync" or "async") for as long as the block runs."""
    if name == "sync":
        yield Flavour(name, None)
        return
    with LoopThread() as loop:
        yield Flavour(name, loop)
