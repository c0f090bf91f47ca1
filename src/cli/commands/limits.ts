import { parseFlags } from '../parse-flags.js';
import { readStatus } from '../../admin/status.js';
import { DEFAULT_SCHEMA } from '../../core/identifier.js';
import { listRateLimits, removeRateLimits } from '../../dispatcher/rate-limits.js';
import { connect, resolveDatabaseUrl } from '../database.js';
import { validateSchemaFlag, COMMON_OPTIONS } from '../flags.js';
import { table } from '../format/table.js';
import { EXIT } from '../usage-error.js';

export const limitsHelp = `Usage: outbox limits [--remove GLOB...] [--json] [--database-url URL] [--schema NAME]

Lists the rate limits declared by dispatchers (--rate-limit, rateLimits), one limit for all of
them together: the pattern, the limit, the burst, the tokens in the bucket now, the current rate
(messages a second over the last ten seconds) and how many went through. Also lists the routes
paused because their destination is down.

Options:
  --remove GLOB       remove a limit (repeatable); a dispatcher declaring it again restores it
  --json              print {"rateLimits": [{pattern, perSecond, burst, tokens, currentRate,
                      taken}], "pausedRoutes": [{route, reason, pausedAt, pausedUntil,
                      failedProbes}]}
  --database-url URL  Postgres connection string (default: $DATABASE_URL)
  --schema NAME       schema of the outbox tables (default: ${DEFAULT_SCHEMA})
  -h, --help          show this help
`;

export async function limitsCommand(argv: string[]): Promise<number> {
  const { values } = parseFlags({
    args: argv,
    options: { ...COMMON_OPTIONS, remove: { type: 'string', multiple: true } },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(limitsHelp);
    return EXIT.ok;
  }
  validateSchemaFlag(values.schema);
  const db = await connect(resolveDatabaseUrl(values['database-url']));
  try {
    const options = { schema: values.schema };
    if (values.remove?.length) {
      const removed = await removeRateLimits(db.executor, values.remove, options);
      process.stdout.write(`removed ${removed.length}: ${removed.join(', ')}\n`);
      return removed.length > 0 ? EXIT.ok : EXIT.failure;
    }
    const rateLimits = await listRateLimits(db.executor, options);
    const { pausedRoutes } = await readStatus(db.executor, { ...options, lastErrors: 1 });
    if (values.json) {
      process.stdout.write(`${JSON.stringify({ rateLimits, pausedRoutes })}\n`);
      return EXIT.ok;
    }
    if (rateLimits.length === 0) process.stdout.write('no rate limits\n');
    else
      process.stdout.write(
        `${table(
          rateLimits.map((l) => [
            l.pattern,
            `${l.perSecond}/s`,
            String(l.burst),
            l.tokens.toFixed(1),
            `${l.currentRate.toFixed(1)}/s`,
            String(l.taken),
          ]),
          {
            header: ['pattern', 'limit', 'burst', 'tokens', 'current', 'taken'],
            align: ['left', 'right', 'right', 'right', 'right', 'right'],
          },
        )}\n`,
      );
    for (const p of pausedRoutes)
      process.stdout.write(
        `paused route ${p.route} until ${p.pausedUntil.toISOString()} (${p.failedProbes} failed probes): ${p.reason}\n`,
      );
    return EXIT.ok;
  } finally {
    await db.close();
  }
}
