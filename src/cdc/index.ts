export {
  createCdcDispatcher,
  type CdcDispatcher,
  type CdcDispatcherState,
} from './cdc-dispatcher.js';
export type { CdcDispatcherOptions, PgConnectionConfig } from './options.js';
export type { CdcEventMap } from './events.js';
export { defaultPublicationName, defaultSlotName, readSlotLag } from './slot.js';
export { formatLsn, parseLsn, type Lsn } from './lsn.js';
export {
  createLaneCdcWakeSource,
  type LaneCdcWakeSource,
  type LaneCdcWakeSourceEventMap,
  type LaneCdcWakeSourceOptions,
} from './lane-cdc-wake-source.js';
