#!/bin/bash
# Part of scripts/plain-path (issue 28, Speed): a stopped copy of the cluster's data directory in $VG_DIR/data
# (VG_DIR default /tmp/plain28vg), databases base and new in it; deterministic instruction counts, insensitive to load.
# vg.sh DB HOW N: instructions (callgrind Ir) of N+20 calls in a single-user backend on the copy
# (cycle: task_cycle 10 per call; acquire: task_acquire(1)+complete).
VG_DIR=${VG_DIR:-/tmp/plain28vg}
db=$1 how=$2 n=$3
fill="TRUNCATE tenure.task, tenure.task_lease_log CASCADE; INSERT INTO tenure.task (kind, state, created_at, last_change, last_action, next_action) SELECT 'bench', 'new', now(), now(), now(), now() - g * interval '1 ms' FROM generate_series(20000, 1, -1) g; VACUUM ANALYZE tenure.task; VACUUM ANALYZE tenure.task_lease_log"
cyc="DO \$\$ DECLARE held jsonb := '[]'; o uuid := gen_random_uuid(); BEGIN FOR i IN 1..NN LOOP SELECT coalesce(jsonb_agg(jsonb_build_object('id', id, 'epoch', epoch, 'outcome', 'complete')) FILTER (WHERE outcome = 'lease'), '[]') INTO held FROM tenure.task_cycle(o, '30 s', 10, ARRAY['bench'], held); COMMIT; END LOOP; END \$\$"
acq="DO \$\$ DECLARE o uuid := gen_random_uuid(); l record; BEGIN FOR i IN 1..NN LOOP SELECT * INTO l FROM tenure.task_acquire(o, '30 s', 1, ARRAY['bench']); COMMIT; PERFORM tenure.task_complete(l.id, o, l.epoch); COMMIT; END LOOP; END \$\$"
if [ "$how" = cycle ]; then loop=$cyc; else loop=$acq; fi
out=$VG_DIR/out/$db-$how-$n-$$
{ echo "$fill" | tr ";" "\n"; echo "${loop//NN/20}"; echo "${loop//NN/$n}"; } | (cd $VG_DIR/out && runuser -u postgres -- valgrind --tool=callgrind --callgrind-out-file=$out.cg --collect-atstart=no --toggle-collect=plpgsql_inline_handler /usr/lib/postgresql/15/bin/postgres --single -D $VG_DIR/data $db >$out.log 2>&1)
ir=$(grep -m1 '^summary:' $out.cg | awk '{print $2}')
echo "$db $how n=$n Ir=$ir per-call=$(( ir / (n + 20) ))"
