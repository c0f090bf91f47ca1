import { importPeer } from '../../publishers/optional-peer.js';
import type { MysqlPool } from './mysql-connection.js';
import { mysqlDriverUrl } from './mysql-url.js';

/** Options of {@link openMysql}. */
export interface OpenMysqlOptions {
  /** Connections in the pool. Default 10. */
  connectionLimit?: number;
}

/**
 * Opens a mysql2 connection pool (mysql2 is an optional peer dependency: `npm install mysql2`)
 * on a `mysql://` or `mariadb://` URL, for the dispatcher, migrations and the admin calls. Your
 * application's business transactions use its own connections; pass one to the writer.
 * BIGINT columns come back as JS numbers (row ids and sequences stay below 2^53).
 *
 * @example
 * ```ts
 * const pool = await openMysql('mysql://root@127.0.0.1:3306/app');
 * await migrateMysql(pool);
 * ```
 */
export async function openMysql(url: string, options: OpenMysqlOptions = {}): Promise<MysqlPool> {
  const mysql = await importPeer('mysql2', 'agent-outbox/mysql', () => import('mysql2/promise'));
  const pool = mysql.createPool({
    uri: mysqlDriverUrl(url),
    connectionLimit: options.connectionLimit ?? 10,
    supportBigNumbers: true,
    bigNumberStrings: false,
  });
  return pool as unknown as MysqlPool;
}
