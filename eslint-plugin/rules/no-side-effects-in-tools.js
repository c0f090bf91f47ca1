import {
  DENY_CONSTRUCTORS,
  DENY_GLOBALS,
  DENY_MODULES,
  GLOBAL_OBJECTS,
  TOOL_FUNCTIONS,
} from './deny-lists.js';

/**
 * `agent-outbox/no-side-effects-in-tools`: a tool handler runs inside a database transaction. An
 * HTTP call, a process, a message to a broker or an SDK call made there cannot be rolled back
 * with it and is repeated when the call is retried — the double charge the outbox exists to
 * prevent. The handler should write an outbox message; a consumer performs the effect.
 *
 * How it decides, per file:
 * 1. Handlers: function arguments of calls to `tool(...)` / `outboxTool(...)` (also as
 *    `x.tool(...)`, imported under another name, or a function declared in the file and passed by
 *    name), and function-valued properties of an options object passed to them. Code nested in a
 *    handler counts; helpers defined elsewhere and called from it are not followed.
 * 2. Side effects inside a handler: calls/`new` of denied globals (`fetch`, `globalThis.fetch`),
 *    of anything imported or required from a denied module, or of a value built from one
 *    (`const stripe = new Stripe(key)` at module level, then `stripe.charges.create()` inside),
 *    `new` of denied client classes, and `require()`/`import()` of denied modules.
 *
 * @type {import('eslint').Rule.RuleModule}
 */
export const noSideEffectsInTools = {
  meta: {
    type: 'problem',
    docs: {
      description:
        'Disallow network, process and SDK side effects inside agent tool handlers; enqueue an outbox message instead.',
      recommended: true,
    },
    schema: [
      {
        type: 'object',
        additionalProperties: false,
        properties: {
          toolFunctions: stringList(),
          denyModules: stringList(),
          allowModules: stringList(),
          denyGlobals: stringList(),
          allowGlobals: stringList(),
          denyConstructors: stringList(),
          allowConstructors: stringList(),
        },
      },
    ],
    messages: {
      sideEffect:
        "{{what}} inside a tool handler: the tool's transaction cannot undo it and a retried call repeats it. Enqueue an outbox message instead (outbox.enqueue({ topic, aggregateId, payload })) and perform the effect in a consumer.",
    },
  },

  create(context) {
    const options = context.options[0] ?? {};
    const toolFunctions = new Set([...TOOL_FUNCTIONS, ...(options.toolFunctions ?? [])]);
    const denyModules = merge(DENY_MODULES, options.denyModules, options.allowModules);
    const allowModules = options.allowModules ?? [];
    const denyGlobals = new Set(merge(DENY_GLOBALS, options.denyGlobals, options.allowGlobals));
    const denyConstructors = new Set(
      merge(DENY_CONSTRUCTORS, options.denyConstructors, options.allowConstructors),
    );
    const sourceCode = context.sourceCode;

    /** @param {string} source */
    const deniedModule = (source) => {
      const name = source.replace(/^node:/, '');
      if (allowModules.some((pattern) => moduleMatches(name, pattern))) return undefined;
      return denyModules.some((pattern) => moduleMatches(name, pattern)) ? name : undefined;
    };

    /** Function nodes that are tool handlers. */
    const handlers = new Set();
    /** Calls and `new`s anywhere in the file; checked at the end, when all handlers are known. */
    const candidates = [];

    /** @param {any} scope @param {string} name */
    function findVariable(scope, name) {
      for (let current = scope; current; current = current.upper) {
        const variable = current.set.get(name);
        if (variable) return variable;
      }
      return undefined;
    }

    /** Where an identifier's value comes from (`from 'stripe'`, `a Stripe client`) when that is denied. */
    function taintOf(identifier, seen = new Set()) {
      const variable = findVariable(sourceCode.getScope(identifier), identifier.name);
      if (!variable || variable.defs.length === 0 || seen.has(variable)) return undefined;
      seen.add(variable);
      for (const def of variable.defs) {
        if (def.type === 'ImportBinding') {
          const declaration = def.parent;
          if (declaration.type === 'ImportDeclaration') {
            if (declaration.importKind === 'type' || def.node.importKind === 'type') continue;
            const denied = deniedModule(String(declaration.source.value));
            if (denied) return `from '${denied}'`;
          } else if (
            declaration.type === 'TSImportEqualsDeclaration' &&
            declaration.moduleReference.type === 'TSExternalModuleReference'
          ) {
            const denied = deniedModule(String(declaration.moduleReference.expression.value));
            if (denied) return `from '${denied}'`;
          }
        } else if (def.type === 'Variable' && def.node.init) {
          const denied = taintOfExpression(def.node.init, seen);
          if (denied) return denied;
        }
      }
      return undefined;
    }

    /** The same for an expression (`new Stripe(key)`, `axios.create()`, `await import('net')`). */
    function taintOfExpression(node, seen) {
      switch (node.type) {
        case 'AwaitExpression':
        case 'TSAsExpression':
        case 'TSNonNullExpression':
          return taintOfExpression(node.expression ?? node.argument, seen);
        case 'ImportExpression':
          return staticModule(node.source);
        case 'CallExpression':
          if (isRequire(node)) return staticModule(node.arguments[0]);
          return taintOfExpression(node.callee, seen);
        case 'NewExpression': {
          const fromModule = taintOfExpression(node.callee, seen);
          if (fromModule) return fromModule;
          if (node.callee.type === 'Identifier' && denyConstructors.has(node.callee.name)) {
            return `a ${node.callee.name} client`;
          }
          return undefined;
        }
        case 'MemberExpression':
          return taintOfExpression(node.object, seen);
        case 'Identifier':
          return taintOf(node, seen);
        default:
          return undefined;
      }
    }

    /** `from 'x'` when `node` is the literal name of a denied module. */
    function staticModule(node) {
      if (node && node.type === 'Literal' && typeof node.value === 'string') {
        const denied = deniedModule(node.value);
        return denied && `from '${denied}'`;
      }
      return undefined;
    }

    function isRequire(node) {
      return (
        node.callee.type === 'Identifier' && node.callee.name === 'require' && !isLocal(node.callee)
      );
    }

    /** True when the identifier is declared in the file (not a global). */
    function isLocal(identifier) {
      const variable = findVariable(sourceCode.getScope(identifier), identifier.name);
      return Boolean(variable && variable.defs.length > 0);
    }

    /** `a.b.c` as a list of names from the root, or undefined for computed/non-name parts. */
    function path(node) {
      if (node.type === 'Identifier') return [node];
      if (
        node.type === 'MemberExpression' &&
        !node.computed &&
        node.property.type === 'Identifier'
      ) {
        const head = path(node.object);
        return head ? [...head, node.property] : undefined;
      }
      if (node.type === 'MemberExpression') {
        const head = path(node.object);
        return head ? [...head, undefined] : undefined;
      }
      return undefined;
    }

    /** Is this callee one of the tool-defining functions? */
    function isToolFunction(callee) {
      if (callee.type === 'MemberExpression' && !callee.computed) {
        return callee.property.type === 'Identifier' && toolFunctions.has(callee.property.name);
      }
      if (callee.type !== 'Identifier') return false;
      if (toolFunctions.has(callee.name)) return true;
      // `import { tool as defineTool } from '@anthropic-ai/claude-agent-sdk'`
      const variable = findVariable(sourceCode.getScope(callee), callee.name);
      return Boolean(
        variable?.defs.some(
          (def) =>
            def.type === 'ImportBinding' &&
            def.node.type === 'ImportSpecifier' &&
            toolFunctions.has(def.node.imported.name ?? def.node.imported.value),
        ),
      );
    }

    function addHandler(node) {
      if (!node) return;
      if (node.type === 'ArrowFunctionExpression' || node.type === 'FunctionExpression') {
        handlers.add(node);
      } else if (node.type === 'ObjectExpression') {
        for (const property of node.properties) {
          if (property.type === 'Property') addHandler(property.value);
        }
      } else if (node.type === 'Identifier') {
        // A handler declared in this file and passed by name.
        const variable = findVariable(sourceCode.getScope(node), node.name);
        for (const def of variable?.defs ?? []) {
          if (def.type === 'FunctionName') handlers.add(def.node);
          else if (def.type === 'Variable') addHandler(def.node.init);
        }
      }
    }

    /** What the call does, in words, when it is a side effect; undefined otherwise. */
    function describe(node) {
      if (node.type === 'ImportExpression') {
        return staticModule(node.source) && `import(${sourceCode.getText(node.source)})`;
      }
      if (node.type === 'CallExpression' && isRequire(node)) {
        return (
          staticModule(node.arguments[0]) && `require(${sourceCode.getText(node.arguments[0])})`
        );
      }
      const names = path(node.callee);
      if (!names) return undefined;
      const [root, ...rest] = names;
      const text = sourceCode.getText(node.callee);
      if (!isLocal(root)) {
        const dotted = names.map((n) => n?.name ?? '[]');
        // fetch(), navigator.sendBeacon(), globalThis.fetch()
        if (denyGlobals.has(dotted.join('.'))) return `${text}()`;
        if (GLOBAL_OBJECTS.includes(root.name) && rest.length > 0) {
          if (denyGlobals.has(dotted.slice(1).join('.'))) return `${text}()`;
        }
      }
      if (node.type === 'NewExpression' && names.length === 1 && denyConstructors.has(root.name)) {
        return `new ${root.name}()`;
      }
      const origin = taintOf(root);
      if (origin)
        return `${node.type === 'NewExpression' ? `new ${text}()` : `${text}()`} (${origin})`;
      return undefined;
    }

    const inHandler = (node) => {
      for (const handler of handlers) {
        if (node.range[0] >= handler.range[0] && node.range[1] <= handler.range[1]) return true;
      }
      return false;
    };

    return {
      CallExpression(node) {
        if (isToolFunction(node.callee))
          for (const argument of node.arguments) addHandler(argument);
        candidates.push(node);
      },
      NewExpression(node) {
        candidates.push(node);
      },
      ImportExpression(node) {
        candidates.push(node);
      },
      'Program:exit'() {
        if (handlers.size === 0) return;
        for (const node of candidates) {
          if (!inHandler(node)) continue;
          const what = describe(node);
          if (what) context.report({ node, messageId: 'sideEffect', data: { what } });
        }
      },
    };
  },
};

function stringList() {
  return { type: 'array', items: { type: 'string', minLength: 1 }, uniqueItems: true };
}

/** `base` plus `extra`, minus `remove`. */
function merge(base, extra = [], remove = []) {
  return [...base, ...extra].filter((entry) => !remove.includes(entry));
}

/** `@aws-sdk/*` matches `@aws-sdk/client-ses`; `stripe` matches `stripe` and `stripe/x`. */
function moduleMatches(name, pattern) {
  const bare = pattern.replace(/^node:/, '');
  if (bare.endsWith('/*')) return name.startsWith(bare.slice(0, -1));
  return name === bare || name.startsWith(`${bare}/`);
}
