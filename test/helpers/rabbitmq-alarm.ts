import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** `vm_memory_high_watermark` as `rabbitmqctl status` reports it. */
export type MemoryWatermark = { relative: number } | { absolute: number };

/** RabbitMQ's default, restored when what was read looks like a test's leftover. */
const DEFAULT_RELATIVE = 0.4;

/** The watermark that trips the memory alarm at once (any node uses more than that). */
const TRIPPING: MemoryWatermark = { relative: 0.000001 };

async function rabbitmqctl(...args: string[]): Promise<string> {
  const { stdout } = await run('rabbitmqctl', args, { timeout: 30_000 });
  return stdout;
}

interface Status {
  vm_memory_high_watermark_setting?: { relative?: number; absolute?: number };
  alarms?: unknown[];
}

async function status(): Promise<Status> {
  return JSON.parse(await rabbitmqctl('status', '--formatter', 'json')) as Status;
}

/** Why `rabbitmqctl` cannot drive the local broker, or undefined when it can. */
export async function rabbitmqctlUnavailable(): Promise<string | undefined> {
  try {
    const s = await status();
    if (s.vm_memory_high_watermark_setting === undefined)
      return 'rabbitmqctl status reports no vm_memory_high_watermark_setting';
    return undefined;
  } catch (error) {
    return `rabbitmqctl status failed: ${(error as Error).message.split('\n')[0]}`;
  }
}

/**
 * The broker's memory alarm, raised and cleared with `rabbitmqctl set_vm_memory_high_watermark`.
 * The broker is shared with other tests on this machine: raise it briefly, and always call
 * `clear` (in a finally), which puts back the watermark read before raising it.
 */
export interface MemoryAlarm {
  /** The watermark read before raising, which `clear` restores. */
  original: MemoryWatermark;
  raise(): Promise<void>;
  clear(): Promise<void>;
  /** True while `rabbitmqctl status` lists an alarm. */
  active(): Promise<boolean>;
}

export async function memoryAlarm(): Promise<MemoryAlarm> {
  const setting = (await status()).vm_memory_high_watermark_setting ?? {};
  let original: MemoryWatermark =
    setting.absolute !== undefined
      ? { absolute: setting.absolute }
      : { relative: setting.relative ?? 0.4 };
  // A run killed while the alarm was raised left the tripping value behind: that is not the
  // broker's setting to restore.
  if ('relative' in original && original.relative < 0.01) {
    console.warn(
      `[agent-outbox tests] RabbitMQ memory watermark found at ${original.relative} (a test's leftover?): restoring ${DEFAULT_RELATIVE}`,
    );
    original = { relative: DEFAULT_RELATIVE };
  }
  const set = (w: MemoryWatermark) =>
    'absolute' in w
      ? rabbitmqctl('set_vm_memory_high_watermark', 'absolute', String(w.absolute))
      : rabbitmqctl('set_vm_memory_high_watermark', String(w.relative));
  return {
    original,
    raise: async () => void (await set(TRIPPING)),
    clear: async () => void (await set(original)),
    active: async () => ((await status()).alarms ?? []).length > 0,
  };
}
