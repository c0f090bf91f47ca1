import type { SqlExecutor } from '../../src/store/sql-executor.js';

/**
 * A stable, diffable text of everything the migrations create in one schema: tables and columns
 * (type, nullability, default), constraints, indexes, functions, triggers and storage options. Our own catalog
 * queries rather than pg_dump, because pg_dump refuses servers newer than itself and the suite may
 * run on an embedded Postgres 18 with a Postgres 15 client installed. The schema name is replaced
 * by `<schema>` so the snapshot does not depend on it.
 */
export async function dumpSchema(executor: SqlExecutor, schema: string): Promise<string> {
  const lines: string[] = [];
  const q = async <T>(text: string): Promise<T[]> => (await executor.query<T>(text, [schema])).rows;

  const columns = await q<{
    table_name: string;
    column_name: string;
    data_type: string;
    is_nullable: string;
    column_default: string | null;
  }>(`
    SELECT c.table_name, c.column_name, c.data_type, c.is_nullable, c.column_default
    FROM information_schema.columns c
    JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
    WHERE c.table_schema = $1 AND t.table_type = 'BASE TABLE'
    ORDER BY c.table_name, c.ordinal_position`);
  for (const c of columns) {
    lines.push(
      `column ${c.table_name}.${c.column_name} ${c.data_type}${c.is_nullable === 'NO' ? ' not null' : ''}${c.column_default ? ` default ${c.column_default}` : ''}`,
    );
  }
  const constraints = await q<{ table: string; name: string; def: string }>(`
    SELECT cl.relname AS table, co.conname AS name, pg_get_constraintdef(co.oid) AS def
    FROM pg_constraint co JOIN pg_class cl ON cl.oid = co.conrelid JOIN pg_namespace n ON n.oid = cl.relnamespace
    WHERE n.nspname = $1 AND co.contype <> 'n' -- PG 18 lists NOT NULL as constraints too
    ORDER BY 1, 2`);
  for (const c of constraints) lines.push(`constraint ${c.table}.${c.name} ${c.def}`);
  const indexes = await q<{ indexname: string; indexdef: string }>(`
    SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname`);
  for (const i of indexes) lines.push(`index ${i.indexname} ${i.indexdef}`);
  const functions = await q<{ name: string; def: string }>(`
    SELECT p.proname AS name, pg_get_functiondef(p.oid) AS def
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY 1, 2`);
  for (const f of functions) lines.push(`function ${f.name}\n${f.def.trim()}`);
  const triggers = await q<{ name: string; def: string }>(`
    SELECT t.tgname AS name, pg_get_triggerdef(t.oid) AS def
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = $1 AND NOT t.tgisinternal ORDER BY 1`);
  for (const t of triggers) lines.push(`trigger ${t.name} ${t.def}`);
  const options = await q<{ name: string; options: string }>(`
    SELECT c.relname AS name, array_to_string(c.reloptions, ',') AS options
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = $1 AND c.reloptions IS NOT NULL ORDER BY 1`);
  for (const o of options) lines.push(`storage ${o.name} ${o.options}`);

  const quoted = new RegExp(`"?\\b${schema}\\b"?\\.`, 'g');
  return `${lines.map((line) => line.replace(quoted, '<schema>.')).join('\n')}\n`;
}
