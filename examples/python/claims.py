"""Claims: hold a fair share of a keyspace's keys (here all three: the only instance),
make a write fenced by each key's epoch, release them; then those epochs fence
nothing. The database comes from PGHOST, PGPORT, PGDATABASE and PGUSER."""

import sys
import uuid

import tenure

conn = tenure.connect("", application_name="claims example", deadline=5)  # every wait bounded
conn.execute("CREATE TABLE IF NOT EXISTS service_checks (service text, instance uuid, epoch bigint)")
driver = tenure.Driver(conn)
driver.claim_register("services", ["service-1", "service-2", "service-3"])


def check(instance: uuid.UUID, service: str, epoch: int) -> None:
    """Work on a held key: it commits only while `instance` holds `service` in `epoch`."""
    with conn.transaction():
        driver.claim_fence("services", instance, service, epoch)  # else ClaimLost, rolled back
        conn.execute("INSERT INTO service_checks VALUES (%s, %s, %s)", (service, instance, epoch))


with tenure.Claimer("", "services", cycle=0.5, expiry=1.5) as claimer:
    if not claimer.wait_for(lambda held: len(held) == 3, timeout=10) or len(held := claimer.held()) != 3:
        sys.exit(f"holds {claimer.held()} after 10 s, not the three keys")
    for service, epoch in held.items():
        check(claimer.instance_id, service, epoch)
    print(f"holds {held}: one fenced write per key committed")
# Leaving the block released every claim: another instance takes the keys at its next cycle.
service, epoch = next(iter(held.items()))
try:
    check(claimer.instance_id, service, epoch)
except tenure.ClaimLost as refused:
    print(f"after releasing: {refused.message}")
else:
    sys.exit(f"a write fenced by the released claim on {service} committed")
