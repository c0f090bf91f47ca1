/** A WAL position (`16/B374D848`) as a number that compares correctly. */
export type Lsn = bigint;

/** Parses Postgres' text form `XXXXXXXX/XXXXXXXX` (two hex halves of a 64-bit position). */
export function parseLsn(text: string): Lsn {
  const match = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/.exec(text);
  if (!match) throw new Error(`not an LSN: "${text}"`);
  return (BigInt(`0x${match[1]}`) << 32n) | BigInt(`0x${match[2]}`);
}

/** Formats an LSN the way Postgres prints it. */
export function formatLsn(lsn: Lsn): string {
  return `${(lsn >> 32n).toString(16).toUpperCase()}/${(lsn & 0xffffffffn).toString(16).toUpperCase()}`;
}
