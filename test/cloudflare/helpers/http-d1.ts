import type { D1Db, D1Result, D1Statement } from '../../../src/cloudflare/index.js';

/**
 * D1 driven from Node over plain HTTP into the Worker, instead of Miniflare's Node-side proxy
 * (`mf.getD1Database`). That proxy makes `prepare()` and `bind()` synchronous calls through a
 * worker thread, and under load (the test files run in parallel on two cores) one of them failed
 * an internal assertion (`message?.id === id`), after which every call of the file failed. Over
 * HTTP the statements still run in workerd's D1, as the Worker's own would.
 */

interface WireStatement {
  sql: string;
  params: unknown[];
}

type Mode = 'all' | 'first' | 'batch';

/** The Worker side: runs the statements of one request on `db` (route it from the test Worker). */
export async function handleD1Request(request: Request, db: D1Db): Promise<Response> {
  const { mode, statements } = (await request.json()) as {
    mode: Mode;
    statements: WireStatement[];
  };
  const prepare = (s: WireStatement) => db.prepare(s.sql).bind(...s.params);
  try {
    if (mode === 'batch') return Response.json(await db.batch(statements.map(prepare)));
    const statement = prepare(statements[0]!);
    return Response.json(
      mode === 'first' ? { row: await statement.first() } : await statement.all(),
    );
  } catch (error) {
    return Response.json(
      { error: error instanceof Error ? error.message : String(error) },
      { status: 500 },
    );
  }
}

/** The Node side: a {@link D1Db} whose statements travel to `handleD1Request`. */
export function httpD1(
  fetch: (
    url: string,
    init: { method: string; body: string },
  ) => Promise<{
    ok: boolean;
    json(): Promise<unknown>;
  }>,
  url: string,
): D1Db {
  const send = async (mode: Mode, statements: WireStatement[]): Promise<unknown> => {
    const response = await fetch(url, {
      method: 'POST',
      body: JSON.stringify({ mode, statements }),
    });
    const body = (await response.json()) as { error?: string };
    if (!response.ok) throw new Error(body.error ?? 'D1 request failed');
    return body;
  };
  class Statement implements D1Statement {
    constructor(readonly wire: WireStatement) {}
    bind(...values: unknown[]): D1Statement {
      return new Statement({ sql: this.wire.sql, params: values });
    }
    all<T>(): Promise<D1Result<T>> {
      return send('all', [this.wire]) as Promise<D1Result<T>>;
    }
    run(): Promise<D1Result<unknown>> {
      return this.all();
    }
    async first<T>(): Promise<T | null> {
      return ((await send('first', [this.wire])) as { row: T | null }).row;
    }
  }
  return {
    prepare: (sql) => new Statement({ sql, params: [] }),
    batch: async <T>(statements: D1Statement[]) =>
      (await send(
        'batch',
        statements.map((s) => (s as Statement).wire),
      )) as D1Result<T>[],
  };
}
