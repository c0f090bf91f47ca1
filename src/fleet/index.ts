/**
 * Fleet mode: one dispatcher process for many tenant databases or schemas, on a connection
 * budget (docs/fleet.md).
 * @packageDocumentation
 */
export {
  createFleetDispatcher,
  type FleetDispatcher,
  type FleetDispatcherOptions,
  type FleetEventMap,
  type FleetTargetInfo,
} from './fleet-dispatcher.js';
export { globMatcher, globToLike } from './glob.js';
export type { FleetEngine } from './target-engine.js';
