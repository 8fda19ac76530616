"""tenure for asyncio: the same driver and runtimes as :mod:`tenure`, as coroutines and
async context managers that run on the application's event loop, without a thread.

- ``AsyncDriver``: one coroutine per SQL function, with the rows and exceptions of
  ``Driver``, over a ``psycopg.AsyncConnection`` (fence your own writes in the same
  transaction: ``async with connection.transaction(): await driver.heartbeat_fence(...)``).
- ``AsyncElector``: ``async with elector.leading() as term:`` runs a body only while
  primary, cancelled when the term is lost.
- ``AsyncReplicaManager``: ``async with manager.active() as epoch:`` and ``async with
  manager.write() as connection:`` on the lock connection, for an active/passive service.
- ``AsyncClaimer``: ``async with claimer.holding(key) as epoch:`` runs a body only while
  the key is held in that epoch, cancelled when the key is lost.
- ``AsyncSubmissionPool``: the batch queue's submitters and monitor as tasks, with
  coroutine ``submit`` and ``status``; the same per-key order and checks.
- ``AsyncTaskWorker``: ``async def`` processors, cancelled when their lease is lost; an
  outcome's async ``writes`` run on its AsyncConnection, in the transition's transaction.
- ``AsyncMaintainer``: the elected maintainer (schedule ticks, retention) as tasks.

Each async runtime shares its decisions (timing, watchdog, outcomes) with its sync twin:
they are written once, as operations (see :mod:`tenure.driver`), and run by two shells.
"""

from tenure.connect import aconnect
from tenure.driver import AsyncDriver
from tenure.runtime.batches import AsyncSubmissionPool
from tenure.runtime.claims import AsyncClaimer
from tenure.runtime.heartbeat import AsyncElector
from tenure.runtime.maintain import AsyncMaintainer
from tenure.runtime.replicas import AsyncReplicaManager
from tenure.runtime.tasks import AsyncTaskWorker

__all__ = [
    "AsyncClaimer",
    "AsyncDriver",
    "AsyncElector",
    "AsyncMaintainer",
    "AsyncReplicaManager",
    "AsyncSubmissionPool",
    "AsyncTaskWorker",
    "aconnect",
]
