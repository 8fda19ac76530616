"""Process harness for tests and demos: real engines on loopback, started and swept away whole.

``procs`` signals process trees and sweeps a scratch directory (with a watchdog that does
it if the caller dies); ``patroni`` runs a 3-node Patroni cluster over etcd with faults
(switchover, SIGKILL, SIGSTOP, a stalled standby, clock offsets); ``pgbouncer`` runs a
transaction pooler.
"""
