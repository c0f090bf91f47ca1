import type { ESLint, Linter, Rule } from 'eslint';

/** Options of `agent-outbox/no-side-effects-in-tools`; every list extends or narrows a default. */
export interface NoSideEffectsInToolsOptions {
  /** More functions whose function arguments are tool handlers (default `tool`, `outboxTool`). */
  toolFunctions?: string[];
  /** More denied modules (`fs`, `@acme/*`, `./clients/stripe.js`). */
  denyModules?: string[];
  /** Modules to stop flagging. */
  allowModules?: string[];
  /** More denied globals (`sendBeacon`, `navigator.sendBeacon`). */
  denyGlobals?: string[];
  /** Globals to stop flagging (e.g. `fetch` in a runtime where it is a local mock). */
  allowGlobals?: string[];
  /** More client classes flagged on `new` wherever they come from. */
  denyConstructors?: string[];
  /** Client classes to stop flagging. */
  allowConstructors?: string[];
}

/** The rule: no network, process or SDK side effects inside agent tool handlers. */
export declare const noSideEffectsInTools: Rule.RuleModule;

/** The `agent-outbox` ESLint plugin, with a flat `recommended` config. */
declare const plugin: ESLint.Plugin & {
  rules: { 'no-side-effects-in-tools': Rule.RuleModule };
  configs: { recommended: Linter.Config };
};
export default plugin;
