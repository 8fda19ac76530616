# make demo   the main job: three instances elect a primary, the primary is killed,
#             a timeline shows the takeover (throwaway local PostgreSQL 15); then a command
#             under `tenure elect --exec` hands over when its shim is killed; then tasks,
#             claims, the batch queue, three replicas behind HAProxy (the active one killed);
#             last, the database itself fails over under running services (3-node Patroni);
#             about 4 minutes on 2 cores, installs included
# make test   every check: sqitch deploy/revert, plpgsql_check, pgTAP, ruff, mypy, pytest
#             (about 32 minutes on 2 cores, installs included)
# make fuzz   the contract fuzz campaign and the batch model test at full size (12,000 random
#             calls, 1,000 model runs; make test runs 2,000 and 200)
# make docs   regenerate docs/sql-reference.md from the COMMENT ON texts
# make bench  heartbeat throughput and takeover times, as ratios to baselines; task throughput
#             side by side with pgqueuer and procrastinate (BENCH_ARGS="--sections peers"); tenure
#             against pgqueuer on a 2-node Patroni cluster with a synchronous standby ("--sections sync",
#             its own durable cluster, 7-10 minutes); a 30-min
#             retention soak with tenure maintain (BENCH_ARGS="--sections soak --soak-seconds 600");
#             the headline on a durable cluster (PostgreSQL's defaults for fsync, synchronous_commit,
#             full_page_writes, wal_sync_method), then BENCH_ARGS, or else BENCH_FAST_ARGS (tasks, peers),
#             on a cluster with fsync off, labelled as the view of CPU cost; every throughput row
#             and the wake-up latencies run BENCH_REPEAT (3) times in interleaved rounds, medians,
#             spreads (MOVED past 15%) and start-ups apart printed.
#             BENCH_DURABILITY=durable (or fast) runs only that cluster. About 3 h 15 min in all
# Each installs what it needs first (Debian packages as root, Python packages in .venv,
# the peers of the bench in .venv-peers).

SHELL := /bin/bash
export PG_BIN ?= /usr/lib/postgresql/15/bin
export PATH := $(PG_BIN):$(PATH)

.PHONY: all deps peers releases test demo bench fuzz partition clean docs
all: test

deps:
	@scripts/install-deps.sh

# pgqueuer and procrastinate for the bench's peers section, in their own .venv-peers
peers:
	@scripts/install-peers.sh

# the v0.1.0 package in its own .venv-v0.1.0, for the rolling upgrade test (python/tests/test_rolling_upgrade.py)
releases:
	@scripts/install-release-venv.sh v0.1.0

test: deps peers releases
	scripts/with-cluster.sh scripts/test.sh

demo: deps
	scripts/with-cluster.sh bash -c 'scripts/deploy.sh tenure_demo && .venv/bin/tenure demo --db "dbname=tenure_demo"'

BENCH_DURABILITY ?= both
BENCH_REPEAT ?= 3
BENCH_FAST_ARGS ?= --sections tasks,peers
bench: deps peers
	@case "$(BENCH_DURABILITY)" in both|durable|fast) ;; *) echo "BENCH_DURABILITY: both, durable or fast" >&2; exit 2;; esac
	@if [ "$(BENCH_DURABILITY)" != fast ]; then \
	    echo "== the headline: a durable cluster"; \
	    TENURE_PG_DURABILITY=durable scripts/with-cluster.sh bash -c 'scripts/deploy.sh tenure_bench && .venv/bin/tenure bench --db "dbname=tenure_bench" --repeat $(BENCH_REPEAT) $(BENCH_ARGS)'; \
	fi
	@if [ "$(BENCH_DURABILITY)" != durable ]; then \
	    echo "== the view of CPU cost: a cluster with fsync off (no production cluster runs so)"; \
	    TENURE_PG_DURABILITY=fast scripts/with-cluster.sh bash -c 'scripts/deploy.sh tenure_bench && .venv/bin/tenure bench --db "dbname=tenure_bench" --repeat $(BENCH_REPEAT) $(if $(filter fast,$(BENCH_DURABILITY)),$(BENCH_ARGS),$(or $(BENCH_ARGS),$(BENCH_FAST_ARGS)))'; \
	fi

# the contract fuzz campaign and the batch queue's model test at full size (make test runs
# 2,000 random calls and 200 model runs)
FUZZ_EXAMPLES ?= 12000
MODEL_EXAMPLES ?= 1000
fuzz: deps
	scripts/with-cluster.sh bash -c 'cd python && TENURE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) TENURE_MODEL_EXAMPLES=$(MODEL_EXAMPLES) ../.venv/bin/pytest tests/test_contract_fuzz.py tests/test_batch_model.py'

# the partition campaign: every area cut by a blackhole, 30% loss and TCP resets,
# PARTITION_TRIALS rounds (make test runs 1); prints the figures table (docs/operations.md)
PARTITION_TRIALS ?= 10
partition: deps
	scripts/with-cluster.sh bash -c 'cd python && PARTITION_TRIALS=$(PARTITION_TRIALS) ../.venv/bin/pytest -s tests/test_partition.py'

# docs/sql-reference.md from the COMMENT ON texts of a fresh deploy (make test fails when it is stale)
docs: deps
	scripts/with-cluster.sh bash -c 'scripts/deploy.sh tenure_docs && .venv/bin/python -m tenure.testing.sqldocs --db "dbname=tenure_docs" --output docs/sql-reference.md'

clean:
	rm -rf .venv .venv-peers .venv-v*/ python/*.egg-info .mypy_cache .ruff_cache python/.pytest_cache examples/java/build
