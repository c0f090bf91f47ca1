import { checkGlob, globMatcher, globToLike } from '../fleet/glob.js';
import { databaseUrlWithName, redactDatabaseUrl } from '../fleet/url.js';
import { discoverAnySchemasSql, discoverDatabasesSql, discoverSchemasSql } from '../sql/fleet.js';
import { connect, resolveDatabaseUrl } from './database.js';
import { UsageError } from './usage-error.js';

/** One tenant a fleet command (`migrate`, `status`) works on. */
export interface CliFleetTarget {
  /** `database`, or `database/schema` in schema mode: how the command names it. */
  name: string;
  url: string;
  schema: string;
  server: string;
}

/** `--databases` / `--schemas` of a fleet command, checked. Undefined: not a fleet command. */
export function fleetGlobs(values: {
  databases?: string;
  schemas?: string;
}): { kind: 'databases' | 'schemas'; glob: string } | undefined {
  if (values.databases !== undefined && values.schemas !== undefined)
    throw new UsageError(
      'give --databases GLOB (a database per tenant) or --schemas GLOB (a schema per tenant), not both',
    );
  const kind = values.databases !== undefined ? 'databases' : 'schemas';
  const glob = values.databases ?? values.schemas;
  if (glob === undefined) return undefined;
  try {
    checkGlob(kind, glob);
  } catch (error) {
    throw new UsageError(`--${(error as Error).message}`);
  }
  return { kind, glob };
}

/**
 * The tenants of every server that match: databases of the server (`--databases`, skipping
 * templates), or schemas of the URL's database (`--schemas`; with `anySchema`, also schemas
 * without an outbox yet, for `migrate`). Sorted by server, then name.
 */
export async function listFleetTargets(args: {
  urls: readonly (string | undefined)[];
  kind: 'databases' | 'schemas';
  glob: string;
  schema: string;
  anySchema?: boolean;
}): Promise<CliFleetTarget[]> {
  const matches = globMatcher(args.glob);
  const urls = args.urls.length > 0 ? args.urls : [undefined];
  const out: CliFleetTarget[] = [];
  for (const flag of urls) {
    const url = resolveDatabaseUrl(flag);
    const server = redactDatabaseUrl(url);
    const db = await connect(url);
    try {
      const sql =
        args.kind === 'databases'
          ? discoverDatabasesSql
          : args.anySchema
            ? discoverAnySchemasSql
            : discoverSchemasSql;
      const { rows } = await db.executor.query<{ name: string }>(sql, [globToLike(args.glob)]);
      const database = db.client.database ?? '';
      for (const { name } of rows) {
        if (!matches(name)) continue;
        out.push(
          args.kind === 'databases'
            ? { name, url: databaseUrlWithName(url, name), schema: args.schema, server }
            : { name: `${database}/${name}`, url, schema: name, server },
        );
      }
    } finally {
      await db.close();
    }
  }
  return out;
}
