/**
 * Thrown when an adapter's client library (an optional peer dependency) is not installed.
 * The message says which package to install, instead of Node's bare "Cannot find package".
 */
export class MissingPeerDependencyError extends Error {
  /** The npm package that is missing. */
  readonly packageName: string;

  constructor(packageName: string, adapter: string, cause: unknown) {
    super(
      `${adapter} needs the optional peer dependency "${packageName}": npm install ${packageName}`,
      { cause },
    );
    this.name = 'MissingPeerDependencyError';
    this.packageName = packageName;
  }
}

function isModuleNotFound(error: unknown, packageName: string): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  const message = error instanceof Error ? error.message : '';
  return (
    (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') &&
    message.includes(packageName)
  );
}

/**
 * Runs `load` (a literal `() => import('pkg')`, so bundlers still see the specifier) and turns
 * "package not found" into a {@link MissingPeerDependencyError}. Other load errors pass through.
 */
export async function importPeer<T>(
  packageName: string,
  adapter: string,
  load: () => Promise<T>,
): Promise<T> {
  try {
    return await load();
  } catch (error) {
    if (isModuleNotFound(error, packageName)) {
      throw new MissingPeerDependencyError(packageName, adapter, error);
    }
    throw error;
  }
}
