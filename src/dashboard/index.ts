/**
 * The web dashboard (SPEC §4.13): one self-contained page served by node:http.
 * @packageDocumentation
 */
export { startDashboard, type Dashboard, type DashboardOptions } from './server.js';
export type { DashboardSample } from './sampler.js';
export type { DashboardState } from './state.js';
