import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { migrateMysql } from '../../src/stores/mysql/migrate-mysql.js';
import type { MysqlPool } from '../../src/stores/mysql/mysql-connection.js';
import { openMysql } from '../../src/stores/mysql/open-mysql.js';
import { requireService } from './services.js';

/** The MariaDB (or MySQL) server tests run on: `MYSQL_URL`, else this machine's MariaDB. */
export const MYSQL_SERVER_URL = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';

/**
 * Whether the MySQL/MariaDB tests run: skipped with a printed reason when the server is not
 * reachable, a failure under `CI=true` (services.ts).
 */
export function requireMysql(): Promise<boolean> {
  const { hostname, port } = new URL(MYSQL_SERVER_URL);
  return requireService('MariaDB/MySQL', hostname, Number(port || 3306));
}

/** A database of one test's own, with a pool on it. */
export interface MysqlTestDatabase {
  name: string;
  url: string;
  pool: MysqlPool;
  /** A single connection of its own, for a business transaction. Close it yourself. */
  connect(): Promise<mysql.Connection>;
  /** Closes the pool and drops the database. */
  drop(): Promise<void>;
}

async function admin(sql: string): Promise<void> {
  const connection = await mysql.createConnection(MYSQL_SERVER_URL);
  try {
    await connection.query(sql);
  } finally {
    await connection.end();
  }
}

/**
 * Creates a database with a random suffix (`outbox_test_…`, or `prefix…`), migrated unless
 * `migrated: false`, dropped by `drop()`. `connectionLimit` sizes the pool (1: every call of the
 * pool runs on one connection, whose session counters a test can then read).
 */
export async function createMysqlTestDatabase(
  options: { migrated?: boolean; prefix?: string; connectionLimit?: number } = {},
): Promise<MysqlTestDatabase> {
  const name = `${options.prefix ?? 'outbox_test_'}${randomBytes(5).toString('hex')}`;
  await admin(`CREATE DATABASE \`${name}\` CHARACTER SET utf8mb4`);
  const url = new URL(MYSQL_SERVER_URL);
  url.pathname = `/${name}`;
  const pool = await openMysql(
    url.toString(),
    options.connectionLimit === undefined ? {} : { connectionLimit: options.connectionLimit },
  );
  if (options.migrated !== false) await migrateMysql(pool);
  return {
    name,
    url: url.toString(),
    pool,
    connect: () => mysql.createConnection(url.toString()),
    drop: async () => {
      await pool.end();
      await admin(`DROP DATABASE IF EXISTS \`${name}\``);
    },
  };
}
