// A task handler whose writes apply exactly once, for `tenure task worker`: the shim leases tasks and hands
// each to this handler as one JSON object (id, kind, state, data, attempt, owner, epoch); the handler makes
// its write and finishes the task in ONE transaction of its own, fenced with the epoch it was given:
//
//   BEGIN; SELECT tenure.task_fence(id, owner, epoch); INSERT ...; SELECT tenure.task_complete(id, owner, epoch); COMMIT
//
// and answers {"outcome": "complete"}; the shim accepts that the task was already finished in that epoch.
// A handler whose lease was lost meanwhile (too slow, its shim killed, the task leased again) is refused
// by the fence and its write rolls back with it, so a task's write commits once, whatever is retried.
//
//   tenure task worker --kind payment --http http://127.0.0.1:8081/ &  node task_handler.js --listen 127.0.0.1:8081
//   tenure task worker --kind payment --exec -- node task_handler.js
//
// With --listen it serves POST requests (the task as the body, the outcome as the answer, kept-alive
// connections); without, it reads one task from stdin and prints the outcome on stdout. The task's data is
// a payment {"account": ..., "amount": ...}, booked as one row of ledger_entries; "work_seconds" in the data
// makes the handler spend that long first, as a call to a slow service would.
// The database comes from the libpq environment (PGHOST, PGPORT, PGUSER, PGDATABASE, ...).
'use strict';

const http = require('node:http');
const { Pool } = require('pg');

const LEASE_LOST = 'TN102';

const pool = new Pool({ max: 4, application_name: 'task handler example', connectionTimeoutMillis: 5000 });
let tableReady = null;

// Two handler processes creating the table at once: one of them gets 23505 (or 42P07), and the table is there.
const ALREADY_THERE = new Set(['23505', '42P07']);

function ensureTable() {
  tableReady ??= pool
    .query(
      `CREATE TABLE IF NOT EXISTS ledger_entries (
        task_id uuid NOT NULL, epoch bigint NOT NULL, owner uuid NOT NULL, account text NOT NULL,
        amount numeric NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`,
    )
    .catch((err) => {
      if (ALREADY_THERE.has(err.code)) return;
      tableReady = null; // try again with the next task
      throw err;
    });
  return tableReady;
}

const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

// The task in, the outcome out.
async function handle(task) {
  for (const field of ['id', 'owner', 'epoch', 'data']) {
    if (task[field] === undefined || task[field] === null) {
      return { outcome: 'fail', error: `the task has no ${field}` };
    }
  }
  const { account, amount, work_seconds: workSeconds = 0 } = task.data;
  if (typeof account !== 'string' || typeof amount !== 'number') {
    return { outcome: 'fail', error: `task ${task.id}: data needs an account (string) and an amount (number)` };
  }
  console.error(`task handler: booking task ${task.id} (epoch ${task.epoch}, attempt ${task.attempt})`);
  await sleep(workSeconds);
  await ensureTable();
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    // TN102 unless this lease (owner, epoch) is still held; keeps anyone else off the task until COMMIT.
    await client.query('SELECT tenure.task_fence($1, $2, $3)', [task.id, task.owner, task.epoch]);
    await client.query('INSERT INTO ledger_entries (task_id, epoch, owner, account, amount) VALUES ($1, $2, $3, $4, $5)', [
      task.id,
      task.epoch,
      task.owner,
      account,
      amount,
    ]);
    await client.query('SELECT tenure.task_complete($1, $2, $3, $4)', [task.id, task.owner, task.epoch, 'booked']);
    await client.query('COMMIT');
    return { outcome: 'complete' };
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    if (err.code === LEASE_LOST) {
      // Nothing was written; whoever holds the task now will book it.
      console.error(`task handler: task ${task.id} epoch ${task.epoch} refused: ${err.message}`);
      return { outcome: 'fail', error: `lease lost: ${err.message}` };
    }
    throw err;
  } finally {
    client.release();
  }
}

function serve(listen) {
  const [host, port] = listen.split(/:(?=[0-9]+$)/);
  const server = http.createServer((request, response) => {
    const chunks = [];
    request.on('data', (chunk) => chunks.push(chunk));
    request.on('end', async () => {
      let answer;
      let status = 200;
      try {
        answer = await handle(JSON.parse(Buffer.concat(chunks).toString()));
      } catch (err) {
        status = 500;
        answer = { outcome: 'fail', error: err.message };
      }
      response.writeHead(status, { 'Content-Type': 'application/json' });
      response.end(JSON.stringify(answer));
    });
  });
  server.keepAliveTimeout = 60000;
  server.listen(Number(port), host, () => console.log(`task handler: listening on http://${host}:${port}/`));
  process.on('SIGTERM', () => {
    server.close(() => pool.end());
    server.closeIdleConnections();
  });
}

async function once() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  try {
    process.stdout.write(`${JSON.stringify(await handle(JSON.parse(Buffer.concat(chunks).toString())))}\n`);
  } finally {
    await pool.end();
  }
}

const at = process.argv.indexOf('--listen');
if (at >= 0) {
  serve(process.argv[at + 1] ?? '127.0.0.1:8081');
} else {
  once().catch((err) => {
    console.error(`task handler: ${err.message}`); // a non-zero exit: a failed attempt, this as its error
    process.exit(1);
  });
}
