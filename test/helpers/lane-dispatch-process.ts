import pg from 'pg';
import { createLaneDispatcher } from '../../src/lanes/lane-dispatcher.js';
import { createPublisherFromUrl, fromPg } from '../../src/index.js';

/**
 * A lanes dispatcher with the options `outbox dispatch --engine lanes` has no flag for (here
 * `asyncCommit`), in its own OS process: `startScript(thisFile, [databaseUrl, publisherUrl,
 * leaseMs, batchSize, asyncCommit])`. Prints `started <id>` once running; stops on SIGTERM.
 * `preparedStatements: false`: it runs behind a transaction pooler in the tests.
 */
const [databaseUrl, publisherUrl, leaseMs, batchSize, asyncCommit] = process.argv.slice(2);
const pool = new pg.Pool({ connectionString: databaseUrl, max: 2 });
pool.on('error', () => undefined);
const dispatcher = createLaneDispatcher({
  executor: fromPg(pool, { preparedStatements: false }),
  publisher: await createPublisherFromUrl(publisherUrl!),
  leaseMs: Number(leaseMs),
  batchSize: Number(batchSize),
  pollIntervalMs: 50,
  asyncCommit: asyncCommit === 'true',
});
dispatcher.on('dispatcher:claim:failure', ({ error }) =>
  process.stderr.write(`claim failure: ${error.message}\n`),
);
dispatcher.start();
process.stdout.write(`started ${dispatcher.id}\n`);
process.once('SIGTERM', () => {
  void dispatcher
    .stop()
    .then(() => pool.end())
    .then(() => process.exit(0));
});
