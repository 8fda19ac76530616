"""Replicas: a ReplicaManager takes the advisory lock and becomes the active replica;
its HTTP server answers a request with a write made on the lock session, which passed
replica_guard; any other session fails that guard. The database comes from PGHOST,
PGPORT, PGDATABASE and PGUSER (a member of tenure_worker)."""

import json
import sys
import urllib.request
from typing import Any

import tenure

conn = tenure.connect("", application_name="replicas example", deadline=5)  # every wait bounded
conn.execute("CREATE TABLE IF NOT EXISTS replica_orders (id int, item text, epoch bigint)")

with tenure.ReplicaManager("", interval=0.5) as replica:

    @tenure.active_only(replica)  # a passive replica answers 503
    def create_order(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with replica.write() as db:  # the lock session, in a transaction that passed replica_guard
            row = (body["id"], body["item"], replica.epoch)
            db.execute("INSERT INTO replica_orders VALUES (%s, %s, %s)", row)
        return 200, {"id": body["id"], "epoch": replica.epoch}

    with tenure.ReplicaServer(replica, port=0, routes={("POST", "/orders"): create_order}) as server:
        if not replica.wait_until_active(10):
            sys.exit("not active within 10 s")
        order = json.dumps({"id": 17, "item": "pears"}).encode()
        with urllib.request.urlopen(server.url + "/orders", data=order, timeout=5) as response:
            answer = json.load(response)
        print(f"active in epoch {replica.epoch}: POST /orders answered {answer}")
    try:  # another session, even in this process, cannot write as the active replica
        with conn.transaction():
            tenure.Driver(conn).replica_guard(epoch=answer["epoch"])
    except tenure.NotPrimary as refused:
        print(f"the guard on another session: {refused.message}")
    else:
        sys.exit("a session without the lock passed the write guard")
