import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import {
  createMysqlLedger,
  createMysqlLedgerTables,
  type MysqlLedgerConnection,
} from '../../../../src/stores/mysql/mysql-ledger.js';
import { describeLedgerConformance } from '../../../conformance/ledger-conformance.js';

/**
 * The consumer ledger on MariaDB (127.0.0.1:3306, root, no password), through the ledger
 * conformance suite: a database of its own per test, dropped after. Skipped with the reason
 * printed when the server is not there; under CI=true that is a failure instead.
 */
const server = { host: '127.0.0.1', port: 3306, user: 'root' };
const down = await mysql
  .createConnection(server)
  .then((connection) => connection.end())
  .then(
    () => undefined,
    (error: Error) => error.message,
  );
if (down) {
  const reason = `MariaDB at 127.0.0.1:3306 is not reachable (${down}); start it with \`start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd\``;
  if (process.env.CI === 'true') throw new Error(`mysql-ledger.test.ts: ${reason}`);
  console.warn(`[mysql-ledger] skipped: ${reason}`);
}

describeLedgerConformance<MysqlLedgerConnection>({
  name: 'MariaDB',
  available: down === undefined,
  async open() {
    const database = `ao_ledger_${randomBytes(6).toString('hex')}`;
    const admin = await mysql.createConnection(server);
    await admin.query(`CREATE DATABASE ${database}`);
    await admin.end();
    const pool = mysql.createPool({ ...server, database, connectionLimit: 6 });
    await createMysqlLedgerTables(pool);
    await createMysqlLedgerTables(pool); // idempotent
    await pool.query(
      'CREATE TABLE charges (message_id VARCHAR(64) NOT NULL, amount INT NOT NULL) ENGINE = InnoDB',
    );
    const rows = async <T>(sql: string, values: unknown[]) =>
      (await pool.query(sql, values))[0] as T[];
    return {
      ledger: createMysqlLedger(pool),
      // Through mysql2 itself (trx), in the handler's transaction.
      charge: async ({ trx }, messageId, amount) => {
        await trx.query('INSERT INTO charges (message_id, amount) VALUES (?, ?)', [
          messageId,
          amount,
        ]);
      },
      charges: async (messageId) =>
        Number(
          (
            await rows<{ n: number }>('SELECT count(*) AS n FROM charges WHERE message_id = ?', [
              messageId,
            ])
          )[0]!.n,
        ),
      ledgerStates: async (consumer, messageId) =>
        (
          await rows<{ state: string }>(
            'SELECT state FROM processed_messages WHERE consumer = ? AND message_id = ?',
            [consumer, messageId],
          )
        ).map((r) => r.state),
      close: async () => {
        await pool.end();
        const dropper = await mysql.createConnection(server);
        await dropper.query(`DROP DATABASE IF EXISTS ${database}`);
        await dropper.end();
      },
    };
  },
});
