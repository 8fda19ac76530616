"""Batches: a SubmissionPool sends a purchase order's price changes to a ledger in the
order they were enqueued, from the instance that holds the key's claim, and records
the ledger's answers. The ledger is a dict in this process. The database comes from
PGHOST, PGPORT, PGDATABASE and PGUSER (a member of tenure_worker)."""

import sys
import threading
import time
import uuid

import tenure

lock = threading.Lock()
applied: dict[str, list[bytes]] = {}  # the ledger: payloads applied per key, in order
answers: dict[uuid.UUID, str] = {}  # what it says of each batch it received
newest_epoch: dict[str, int] = {}  # per key, the newest claim epoch it has seen


def submit(batch: tenure.BatchGrant) -> None:
    with lock:  # a ledger should refuse a submitter whose claim on the key is older
        if batch.claim_epoch < newest_epoch.get(batch.key, 0):
            raise RuntimeError(f"stale claim epoch {batch.claim_epoch} for {batch.key}")
        newest_epoch[batch.key] = batch.claim_epoch
        applied.setdefault(batch.key, []).append(batch.payload)
        answers[batch.id] = "committed"


def status(batch: tenure.BatchGrant) -> str | None:
    return answers.get(batch.id, "unknown")  # unknown: never received, so it is sent again


driver = tenure.Driver(tenure.connect("", application_name="batches example", deadline=5))
driver.batch_configure("orders", mode="serial")  # one batch of a key in flight at a time
key = f"po-{uuid.uuid4().hex[:8]}"  # a new purchase order
prices = [b"price 2.75", b"price 3.00", b"price 3.25"]
for price in prices:
    driver.batch_enqueue("orders", key, price)
with tenure.SubmissionPool("", "orders", submit=submit, status=status, cycle=0.5, expiry=1.5):
    for _ in range(100):  # up to 10 s
        if [b.status for b in driver.batches("orders", key=key)] == ["committed"] * len(prices):
            break
        time.sleep(0.1)
    else:
        sys.exit(f"{key}: not every batch committed within 10 s: {driver.batches('orders', key=key)}")
if applied[key] != prices:
    sys.exit(f"{key}: the ledger applied {applied[key]}, not {prices}")
print(f"{key}: the ledger applied {applied[key]} in order, under claim epoch {newest_epoch[key]}")
