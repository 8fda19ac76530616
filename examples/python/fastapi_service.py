"""A FastAPI service, asyncio all the way, that runs as several copies behind HAProxy.
AsyncReplicaManager makes its HTTP API active/passive: GET /health/active answers 200
only on the active copy (HAProxy's health check) and a passive copy answers 503, and
each order is written on the replica's lock connection, fenced by its epoch.
AsyncElector runs a leader-only background job: each run writes a row fenced by the
term, and leaving the term cancels the job. Both start and stop with the lifespan:
shutting down resigns and releases, so another copy takes over at its next try.

`python fastapi_service.py --port 8080` serves until SIGTERM; without --port it
serves on a free port, sends itself one order, waits for a job run and exits.
The database comes from PGHOST, PGPORT, PGDATABASE and PGUSER (a member of
tenure_worker); EXAMPLE_INTERVAL sets tenure's interval (default 0.5 s)."""

import argparse
import asyncio
import contextlib
import json
import logging
import os
import socket
import sys
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

import tenure
from tenure.aio import AsyncDriver, AsyncElector, AsyncReplicaManager, aconnect

JOBS = "fastapi-jobs"  # the service type whose primary runs the leader-only job
INTERVAL = float(os.environ.get("EXAMPLE_INTERVAL", "0.5"))
log = logging.getLogger("fastapi_service")


async def leader_job(elector: AsyncElector) -> None:
    """While this copy is primary: one row per interval, each fenced by the term."""
    while True:
        try:
            # leading() waits until primary; when the term ends (or its safe window passes
            # without a renewal) it cancels the body and raises NotPrimary in its place.
            async with (
                elector.leading() as term,
                await aconnect("", application_name="fastapi job", deadline=5) as db,
            ):
                while True:
                    async with db.transaction():  # commits only while primary in this term
                        await AsyncDriver(db).heartbeat_fence(elector.instance_id, JOBS, term)
                        row = (elector.instance_id, term)
                        await db.execute("INSERT INTO job_runs (instance, term) VALUES (%s, %s)", row)
                    await asyncio.sleep(INTERVAL)
        except (tenure.NotPrimary, psycopg.Error) as error:
            log.warning("leader job paused: %s", error)
            await asyncio.sleep(INTERVAL)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with await aconnect("", application_name="fastapi setup", deadline=5) as db, db.transaction():
        # Copies start together: one at a time, or two CREATE TABLE IF NOT EXISTS collide.
        await db.execute("SELECT pg_advisory_xact_lock(hashtext('fastapi_service setup'))")
        await db.execute("CREATE TABLE IF NOT EXISTS orders (id int, item text, epoch bigint)")
        await db.execute(
            "CREATE TABLE IF NOT EXISTS job_runs (instance uuid, term bigint, done_at timestamptz "
            "DEFAULT clock_timestamp())"
        )
    async with (
        AsyncReplicaManager("", interval=INTERVAL) as replica,
        AsyncElector("", JOBS, interval=INTERVAL, timeout=3 * INTERVAL) as elector,
    ):
        app.state.replica, app.state.elector = replica, elector
        job = asyncio.create_task(leader_job(elector))
        yield  # serving; then the job stops, the elector resigns, the replica releases its lock
        job.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await job


app = FastAPI(lifespan=lifespan)


class Order(BaseModel):
    id: int
    item: str


@app.get("/health/active")
async def health(request: Request) -> JSONResponse:
    status = request.app.state.replica.status()
    return JSONResponse(status, status_code=200 if status["role"] == "active" else 503)


@app.post("/orders")
async def create_order(order: Order, request: Request) -> dict[str, Any]:
    replica: AsyncReplicaManager = request.app.state.replica
    try:
        # The lock connection, in a transaction that passed replica_guard: a copy that lost
        # the lock (even one that does not know it yet) cannot commit.
        async with replica.write() as db:
            cursor = await db.execute(
                "INSERT INTO orders VALUES (%s, %s, tenure.replica_guard()) RETURNING epoch",
                (order.id, order.item),
            )
            row = await cursor.fetchone()
    except tenure.NotPrimary as refused:  # passive: HAProxy sends the retry to the active copy
        raise HTTPException(503, refused.message) from refused
    return {"id": order.id, "replica": replica.name, "epoch": row[0] if row else None}


async def try_it() -> None:
    """Serve on a free port, place one order through the API, wait for a job run, stop."""
    listening = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listening.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[listening]))
    while not server.started:
        await asyncio.sleep(0.05)
    if not await app.state.replica.wait_until_active(10):
        sys.exit("not active within 10 s")
    order = urllib.request.Request(url + "/orders", data=b'{"id": 17, "item": "pears"}', method="POST")
    order.add_header("Content-Type", "application/json")
    with await asyncio.to_thread(urllib.request.urlopen, order, timeout=5) as response:  # a client
        print(f"POST /orders answered {json.load(response)}")
    async with await aconnect("", application_name="fastapi check", deadline=5) as db:
        for _ in range(100):
            runs = await (await db.execute("SELECT count(*), max(term) FROM job_runs")).fetchone()
            if runs and runs[0]:
                print(f"the leader job ran {runs[0]} time(s), last in term {runs[1]}")
                break
            await asyncio.sleep(0.1)
        else:
            sys.exit("the leader job never ran")
    server.should_exit = True  # the lifespan ends: resign, release
    await serving


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, help="serve on this port until SIGTERM")
    port = parser.parse_args().port
    if port is None:
        asyncio.run(try_it())
    else:
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
