import type { DispatcherEventMap } from '../dispatcher/events.js';

/**
 * Events of a CDC dispatcher: its own `cdc:*` events plus every polling-dispatcher event, emitted
 * by both its WAL-driven worker and its sweeper (the same names, so metrics attach once).
 */
export interface CdcEventMap extends DispatcherEventMap {
  /** Streaming from `lsn` (the slot's confirmed position). `reconnect`: not the first stream. */
  'cdc:stream:start': [{ slot: string; lsn: string; reconnect: boolean }];
  /** The stream failed or could not start; it is reopened after `retryInMs`. */
  'cdc:stream:lost': [{ error: Error; retryInMs: number }];
  /** More candidates pending than `maxCandidates`: the stream pauses until they are worked off. */
  'cdc:stream:pause': [{ candidates: number }];
  /** A transaction committed rows to the outbox (`rowIds`), ending at `lsn`. */
  'cdc:transaction:receive': [{ lsn: string; rowIds: string[] }];
  'cdc:slot:create': [{ slot: string; lsn: string }];
  /** The slot was confirmed up to `lsn`: every outbox row committed before it is handled. */
  'cdc:lsn:confirm': [{ lsn: string }];
  /** Periodic: WAL bytes the server retains for the slot (gauge `outbox_cdc_slot_lag_bytes`). */
  'cdc:slot:lag': [{ slot: string; lagBytes: number }];
  /** A WAL-driven cycle failed (claim, state check); candidates are retried, the sweeper covers. */
  'cdc:cycle:failure': [{ error: Error }];
}
