import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = fileURLToPath(new URL('../../../', import.meta.url));

/** The bundled example Worker and the source files that went into it. */
export interface WorkerBundle {
  script: string;
  inputs: string[];
}

/**
 * Bundles examples/cloudflare/src/worker.ts (and src/cloudflare with it) into one ES module, as
 * wrangler would — or another entry point (a test Worker built on the example). esbuild comes with
 * vitest/tsx. `platform: 'neutral'` with no externals makes an import of a Node built-in
 * (`node:crypto`, `pg`) a build error: the bundle must run in workerd.
 */
export async function bundleExampleWorker(
  entry = 'examples/cloudflare/src/worker.ts',
): Promise<WorkerBundle> {
  const result = await build({
    entryPoints: [`${root}${entry}`],
    bundle: true,
    format: 'esm',
    platform: 'neutral',
    target: 'es2022',
    write: false,
    metafile: true,
    logLevel: 'silent',
  });
  const output = result.outputFiles[0];
  if (!output) throw new Error('esbuild produced no output');
  return { script: output.text, inputs: Object.keys(result.metafile.inputs) };
}
