// An elected job under `tenure elect --exec`: the shim starts it when this instance becomes primary, with
// the grant in its environment (TENURE_INSTANCE_ID, TENURE_TYPE, TENURE_TERM), and stops it (SIGTERM, then
// SIGKILL) the moment the term is lost or its safe window passes. Every write is fenced by the term in the
// write's own transaction, so it commits only while this instance is still the primary in that term: a
// job that outlived its grant (a frozen shim, a lost database) can never write.
//
//   tenure elect --type nightly --interval 0.5 --timeout 1.5 --exec -- node elected_job.js
//
// It writes one row into job_runs every JOB_PERIOD seconds (0.1) until SIGTERM; then it checks that every
// write it was told committed is there, numbered 1..n in its term and nothing else, and exits 0 only if so.
// A refused fence ends it at once with exit code 3 (the term is gone: nothing more may be written).
// The database comes from the libpq environment (PGHOST, PGPORT, PGUSER, PGDATABASE, ...).
'use strict';

const { Client } = require('pg');

const NOT_PRIMARY = 'TN101';

function grantFromEnvironment() {
  const { TENURE_INSTANCE_ID: instance, TENURE_TYPE: utype, TENURE_TERM: term } = process.env;
  if (!instance || !utype || !/^[1-9][0-9]*$/.test(term ?? '')) {
    throw new Error('run me under `tenure elect --exec`: TENURE_INSTANCE_ID, TENURE_TYPE, TENURE_TERM unset');
  }
  return { instance, utype, term };
}

const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

async function main() {
  const grant = grantFromEnvironment();
  const period = Number(process.env.JOB_PERIOD ?? '0.1');
  let stopping = false;
  process.on('SIGTERM', () => {
    stopping = true; // finish the write in flight, then stop
  });

  const client = new Client({ application_name: `elected job ${grant.utype} term ${grant.term}` });
  await client.connect();
  try {
    await client.query(`CREATE TABLE IF NOT EXISTS job_runs (
        utype text NOT NULL, instance uuid NOT NULL, term bigint NOT NULL, n integer NOT NULL,
        at timestamptz NOT NULL DEFAULT clock_timestamp())`);
    console.log(`elected job: primary of ${grant.utype} in term ${grant.term}, writing`);
    let committed = 0;
    while (!stopping) {
      try {
        await client.query('BEGIN');
        // Refused (TN101) unless this instance is the live primary in this term; holds off any
        // takeover until the transaction ends.
        await client.query('SELECT tenure.heartbeat_fence($1, $2, $3)', [grant.instance, grant.utype, grant.term]);
        await client.query('INSERT INTO job_runs (utype, instance, term, n) VALUES ($1, $2, $3, $4)', [
          grant.utype,
          grant.instance,
          grant.term,
          committed + 1,
        ]);
        await client.query('COMMIT');
        committed += 1;
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {});
        if (err.code === NOT_PRIMARY) {
          console.log(`elected job: write ${committed + 1} refused, term ${grant.term} is over: ${err.message}`);
          process.exitCode = 3;
          return;
        }
        throw err;
      }
      await sleep(period);
    }
    // Stopped by the shim: every acknowledged write is in the table under this term, and nothing else.
    const { rows } = await client.query(
      'SELECT count(*)::int AS count, coalesce(max(n), 0) AS last FROM job_runs WHERE utype = $1 AND term = $2',
      [grant.utype, grant.term],
    );
    const { count, last } = rows[0];
    if (count !== committed || last !== committed) {
      throw new Error(`term ${grant.term}: ${committed} writes committed, table has ${count} up to n = ${last}`);
    }
    console.log(`elected job: stopped after ${committed} fenced writes in term ${grant.term}, all in place`);
  } finally {
    await client.end();
  }
}

main().catch((err) => {
  console.error(`elected job: ${err.message}`);
  process.exit(1);
});
