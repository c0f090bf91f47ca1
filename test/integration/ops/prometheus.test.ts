import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted } from '../../helpers/outbox-fixtures.js';
import { eventually, freePort, requireBinary } from '../../fixtures/ops/tools.js';

const root = fileURLToPath(new URL('../../..', import.meta.url));
const rules = join(root, 'ops/prometheus/alerts.test.yml');
const fixture = fileURLToPath(
  new URL('../../fixtures/ops/dispatcher-with-metrics.ts', import.meta.url),
);

describe('alert rules', () => {
  it('promtool test rules ops/prometheus/alerts.test.yml passes', async ({ skip }) => {
    const promtool = requireBinary('promtool', 'prometheus', skip);
    const { stdout } = await promisify(execFile)(promtool, ['test', 'rules', rules], { cwd: root });
    expect(stdout).toMatch(/SUCCESS/);
  });

  it("the rules file defines issue 8's five alerts, issue 20's approval wait and issue 44's read-only database", async ({
    skip,
  }) => {
    const promtool = requireBinary('promtool', 'prometheus', skip);
    const { stdout } = await promisify(execFile)(promtool, [
      'check',
      'rules',
      join(root, 'ops/prometheus/alerts.yml'),
    ]);
    expect(stdout).toMatch(/SUCCESS: 7 rules found/);
  });
});

describe('a real Prometheus scrapes a running dispatcher', () => {
  let db: TestDatabase;
  const children: ChildProcess[] = [];
  let temp: string | undefined;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    for (const child of children) if (child.exitCode === null) child.kill('SIGTERM');
    await Promise.all(
      children.map((c) => (c.exitCode === null ? new Promise((r) => c.once('exit', r)) : null)),
    );
    if (temp) await rm(temp, { recursive: true, force: true });
    await db.drop();
  });

  it('outbox_messages_published_total arrives in Prometheus via its HTTP API', async ({ skip }) => {
    const prometheus = requireBinary('prometheus', 'prometheus', skip);
    await enqueueCommitted(db.pool, [
      { topic: 'mail.send', aggregateId: 'p1', payload: {} },
      { topic: 'mail.send', aggregateId: 'p2', payload: {} },
      { topic: 'mail.send', aggregateId: 'p3', payload: {} },
    ]);

    const dispatcher = spawn(process.execPath, ['--import', 'tsx', fixture], {
      cwd: root,
      env: { ...process.env, DATABASE_URL: db.url },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(dispatcher);
    let output = '';
    dispatcher.stderr!.on('data', (c: Buffer) => (output += c.toString()));
    const metricsUrl = await new Promise<string>((resolve, reject) => {
      dispatcher.stdout!.on('data', (c: Buffer) => {
        output += c.toString();
        const line = output.split('\n').find((l) => l.startsWith('{"metricsUrl"'));
        if (line) resolve((JSON.parse(line) as { metricsUrl: string }).metricsUrl);
      });
      dispatcher.once('exit', (code) => reject(new Error(`fixture exited ${code}: ${output}`)));
    });

    temp = await mkdtemp(join(tmpdir(), 'outbox-prometheus-'));
    const config = join(temp, 'prometheus.yml');
    await writeFile(
      config,
      [
        'global:',
        '  scrape_interval: 1s',
        '  evaluation_interval: 1s',
        'scrape_configs:',
        '  - job_name: outbox-dispatcher',
        '    static_configs:',
        `      - targets: ['${new URL(metricsUrl).host}']`,
        '',
      ].join('\n'),
    );
    const apiPort = await freePort();
    const server = spawn(
      prometheus,
      [
        `--config.file=${config}`,
        `--storage.tsdb.path=${join(temp, 'data')}`,
        `--web.listen-address=127.0.0.1:${apiPort}`,
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    children.push(server);
    let serverLog = '';
    server.stderr!.on('data', (c: Buffer) => (serverLog += c.toString()));

    const query = async (promql: string) => {
      const response = await fetch(
        `http://127.0.0.1:${apiPort}/api/v1/query?query=${encodeURIComponent(promql)}`,
      );
      const body = (await response.json()) as {
        status: string;
        data: { result: { metric: Record<string, string>; value: [number, string] }[] };
      };
      return body.data.result;
    };
    const published = await eventually(
      'the published counter in Prometheus',
      async () => {
        const result = await query('outbox_messages_published_total{job="outbox-dispatcher"}');
        return result.length > 0 && Number(result[0]!.value[1]) === 3 ? result : undefined;
      },
      { attempts: 240 },
    ).catch((error: Error) => {
      throw new Error(`${error.message}\nprometheus log:\n${serverLog.slice(-2000)}`);
    });
    expect(published[0]!.metric).toMatchObject({ topic: 'mail.send', job: 'outbox-dispatcher' });

    const pending = await eventually('the pending gauge', async () => {
      const result = await query('outbox_pending_messages');
      return result.length > 0 ? result : undefined;
    });
    expect(pending[0]!.value[1]).toBe('0');
    const up = await query('up{job="outbox-dispatcher"}');
    expect(up[0]!.value[1]).toBe('1');
  });
});
