import { noSideEffectsInTools } from './rules/no-side-effects-in-tools.js';

/**
 * ESLint plugin `agent-outbox` (flat config). Plain ESM JavaScript so `eslint.config.js` loads it
 * without a build step.
 *
 * @example
 * ```js
 * // eslint.config.js
 * import agentOutbox from 'agent-outbox/eslint-plugin';
 * export default [
 *   agentOutbox.configs.recommended,
 *   // or, with options:
 *   {
 *     plugins: { 'agent-outbox': agentOutbox },
 *     rules: { 'agent-outbox/no-side-effects-in-tools': ['error', { denyModules: ['fs'] }] },
 *   },
 * ];
 * ```
 */
const plugin = {
  meta: { name: 'agent-outbox' },
  rules: { 'no-side-effects-in-tools': noSideEffectsInTools },
  configs: {},
};

/** Enables `no-side-effects-in-tools` as an error. */
plugin.configs.recommended = {
  name: 'agent-outbox/recommended',
  plugins: { 'agent-outbox': plugin },
  rules: { 'agent-outbox/no-side-effects-in-tools': 'error' },
};

export default plugin;
export { noSideEffectsInTools };
