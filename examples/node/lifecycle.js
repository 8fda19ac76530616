// tenure's whole life cycle from Node.js with the `pg` package, no Python: elect, claim keys, run a task,
// queue batches. Run it as a login role that is a member of tenure_worker, on a database where tenure is
// deployed; the connection comes from the libpq environment (PGHOST, PGPORT, PGUSER, PGDATABASE, ...)
// or from a URL given as the first argument:
//
//   npm ci && node lifecycle.js postgresql://app@localhost/mydb
//
// Every step checks what it got; the first failed check ends the program with exit code 1.
'use strict';

const assert = require('node:assert/strict');
const { randomUUID } = require('node:crypto');
const { Client } = require('pg');

// tenure's errors carry SQLSTATEs of class TN; pg exposes the SQLSTATE as err.code.
const TN = {
  invalidArgument: 'TN001',
  notPrimary: 'TN101',
  leaseLost: 'TN102',
  claimLost: 'TN103',
  invalidTransition: 'TN301',
};

function ok(what) {
  console.log(`ok: ${what}`);
}

async function expectError(promise, sqlstate, what) {
  try {
    await promise;
  } catch (err) {
    assert.equal(err.code, sqlstate, `${what}: got ${err.code} ${err.message}`);
    ok(`${what} (${err.code}: ${err.message})`);
    return;
  }
  assert.fail(`${what}: no error, expected ${sqlstate}`);
}

async function main() {
  const client = new Client(process.argv[2] ? { connectionString: process.argv[2] } : {});
  await client.connect();
  // One row, or the rows, of a query with parameters.
  const rows = async (text, values) => (await client.query(text, values)).rows;
  const one = async (text, values) => {
    const result = await rows(text, values);
    assert.equal(result.length, 1, `one row expected from ${text}`);
    return result[0];
  };

  // Two instances with a new id per process incarnation; names unique to this run.
  const a = randomUUID();
  const b = randomUUID();
  const run = `example-${randomUUID().slice(0, 8)}`;
  const utype = `${run}-scheduler`;
  const services = `${run}-services`;
  const ledger = `${run}-ledger`;

  try {
    // 1. Election: I = 1 s, T = 3 s. The first bid wins term 1; b's bid changes nothing.
    const heartbeat = 'SELECT instance_id, term FROM tenure.update_heartbeat($1, $2, $3, $4)';
    let entry = await one(heartbeat, [a, utype, '3 seconds', '1 second']);
    assert.deepEqual([entry.instance_id, entry.term], [a, '1']); // bigint arrives as a string
    ok('a is elected primary in term 1');
    entry = await one(heartbeat, [b, utype, '3 seconds', '1 second']);
    assert.equal(entry.instance_id, a);
    ok("b's bid returns the live primary a");
    entry = await one('SELECT instance_id FROM tenure.get_primary($1)', [utype]);
    assert.equal(entry.instance_id, a);
    ok('get_primary names a');
    const check = await one(
      'SELECT tenure.check_primary($1, $3) AS a, tenure.check_primary($2, $3) AS b',
      [a, b, utype],
    );
    assert.deepEqual(check, { a: true, b: false });
    ok('check_primary: a yes, b no');

    // A write fenced by a's term, in the write's own transaction.
    await client.query('BEGIN');
    await client.query('SELECT tenure.heartbeat_fence($1, $2, $3)', [a, utype, 1]);
    await client.query('COMMIT');
    ok('a fences a write with term 1');

    // a resigns (clean shutdown); b takes over at once, in term 2. a's term 1 is now stale.
    assert.equal((await one('SELECT tenure.heartbeat_resign($1, $2) AS r', [a, utype])).r, true);
    ok('a resigns');
    entry = await one(heartbeat, [b, utype, '3 seconds', '1 second']);
    assert.deepEqual([entry.instance_id, entry.term], [b, '2']);
    ok('b takes over in term 2');
    await expectError(
      client.query('SELECT tenure.heartbeat_fence($1, $2, $3)', [a, utype, 1]),
      TN.notPrimary,
      'a write fenced by the stale term 1 is refused',
    );
    await expectError(
      client.query(heartbeat, [a, utype, '2 seconds', '1 second']),
      'TN002',
      'T must be more than 2I',
    );

    // 2. Claims: three keys; a alone is live, so its fair share is all three.
    assert.equal((await one('SELECT tenure.claim_register($1, $2) AS n', [services, ['s1', 's2', 's3']])).n, 3);
    ok('three keys registered');
    let grants = await rows('SELECT key, epoch, change FROM tenure.claim_take($1, $2, $3)', [services, a, '30 s']);
    assert.deepEqual(grants.map((g) => [g.key, g.epoch, g.change]).sort(), [
      ['s1', '1', 'taken'],
      ['s2', '1', 'taken'],
      ['s3', '1', 'taken'],
    ]);
    ok('a takes all three in epoch 1');
    await client.query('BEGIN');
    await client.query('SELECT tenure.claim_fence($1, $2, $3, $4)', [services, a, 's1', 1]);
    await client.query('COMMIT');
    ok('a fences a write on s1 with epoch 1');
    assert.equal((await one('SELECT tenure.claim_check($1, $2, $3, $4) AS c', [services, b, 's1', 1])).c, false);
    ok('b does not hold s1');
    assert.equal((await one('SELECT tenure.claim_release($1, $2, $3) AS n', [services, a, ['s1']])).n, 1);
    ok('a releases s1');
    await expectError(
      client.query('SELECT tenure.claim_fence($1, $2, $3, $4)', [services, a, 's1', 1]),
      TN.claimLost,
      'a write on the released s1 is refused',
    );
    grants = await rows('SELECT key, epoch FROM tenure.claim_take($1, $2, $3, $4)', [services, b, '30 s', 1]);
    assert.deepEqual(grants, [{ key: 's1', epoch: '2' }]);
    ok('b takes s1 in epoch 2');

    // 3. A task: enqueue (idempotent by key), lease, a step, complete; then the stale epoch is refused.
    const enqueue = 'SELECT id, created FROM tenure.task_enqueue($1, $2, p_idempotency_key => $3)';
    const task = await one(enqueue, [run, { to: 'a@example.org' }, run]);
    assert.equal(task.created, true);
    const again = await one(enqueue, [run, { to: 'a@example.org' }, run]);
    assert.deepEqual(again, { id: task.id, created: false });
    ok('the same idempotency key enqueues nothing new');
    const lease = await one('SELECT id, epoch, data FROM tenure.task_acquire($1, $2, 1, $3)', [a, '30 s', [run]]);
    assert.deepEqual(lease, { id: task.id, epoch: '1', data: { to: 'a@example.org' } });
    ok('a leases the task in epoch 1');
    await client.query('SELECT tenure.task_update($1, $2, $3, $4, $5)', [task.id, a, lease.epoch, 'sending', { tries: 1 }]);
    ok('a moves the task to state sending');
    await client.query('SELECT tenure.task_complete($1, $2, $3, $4)', [task.id, a, lease.epoch, 'sent']);
    ok('a completes the task');
    const row = await one('SELECT status, state, data FROM tenure.tasks WHERE id = $1', [task.id]);
    assert.deepEqual(row, { status: 'done', state: 'sent', data: { tries: 1 } });
    ok('the task is done in state sent');
    await expectError(
      client.query('SELECT tenure.task_complete($1, $2, $3)', [task.id, a, lease.epoch]),
      TN.leaseLost,
      'completing it again is refused: the lease is gone',
    );

    // 4. Batches, serial by default: two for key k1, submitted in order by the holder of k1's claim.
    const batchEnqueue = 'SELECT id, seq, created FROM tenure.batch_enqueue($1, $2, $3)';
    const first = await one(batchEnqueue, [ledger, 'k1', Buffer.from('debit 10')]);
    const second = await one(batchEnqueue, [ledger, 'k1', Buffer.from('credit 10')]);
    assert.deepEqual([first.seq, second.seq, second.created], ['1', '2', true]);
    ok('the batches of k1 get seq 1 and 2');
    grants = await rows('SELECT key FROM tenure.claim_take($1, $2, $3)', [ledger, a, '30 s']);
    assert.deepEqual(grants, [{ key: 'k1' }]);
    ok('a takes the claim on k1');
    const select = 'SELECT id, seq, payload, claim_epoch FROM tenure.batch_select($1, $2, 10)';
    const resolve = 'SELECT tenure.batch_resolve($1, $2, $3, $4, $5) AS status';
    for (const [batch, payload] of [
      [first, 'debit 10'],
      [second, 'credit 10'],
    ]) {
      const selected = await rows(select, [ledger, a]);
      assert.equal(selected.length, 1, 'serial: one batch of k1 at a time');
      assert.equal(selected[0].id, batch.id);
      assert.equal(selected[0].payload.toString(), payload); // bytea arrives as a Buffer
      ok(`serial: batch ${batch.seq} is selected alone`);
      if (batch === second) {
        await expectError(
          client.query(resolve, [ledger, b, batch.id, selected[0].claim_epoch, 'committed']),
          TN.claimLost,
          'b, which holds no claim on k1, cannot resolve it',
        );
      }
      const resolved = await one(resolve, [ledger, a, batch.id, selected[0].claim_epoch, 'committed']);
      assert.equal(resolved.status, 'committed');
      ok(`batch ${batch.seq} resolved committed`);
    }
    assert.deepEqual(await rows(select, [ledger, a]), []);
    ok('nothing left to select');
    await expectError(
      client.query(resolve, [ledger, a, second.id, 1, 'invalid']),
      TN.invalidTransition,
      'a committed batch cannot be resolved again',
    );
    const depth = await one(
      'SELECT committed, queued, pending FROM tenure.batch_keys WHERE keyspace = $1 AND key = $2',
      [ledger, 'k1'],
    );
    assert.deepEqual(depth, { committed: '2', queued: '0', pending: '0' });
    ok('batch_keys: k1 has 2 committed, none waiting');
    await expectError(
      client.query('SELECT * FROM tenure.batch_select($1, $2, 0)', [ledger, a]),
      TN.invalidArgument,
      'a limit of 0 is refused',
    );

    // Clean up what this run holds.
    await client.query('SELECT tenure.heartbeat_resign($1, $2)', [b, utype]);
    for (const [keyspace, instance] of [
      [services, a],
      [services, b],
      [ledger, a],
    ]) {
      await client.query('SELECT tenure.claim_release($1, $2)', [keyspace, instance]);
    }
    console.log('lifecycle.js: every check passed');
  } finally {
    await client.end();
  }
}

main().catch((err) => {
  console.error(`lifecycle.js: ${err.message}`);
  process.exit(1);
});
