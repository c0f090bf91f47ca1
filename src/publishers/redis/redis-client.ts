/**
 * The subset of `ioredis` the publisher calls, typed structurally so the core never imports the
 * SDK (STYLE.md, the Kysely rule). A real `Redis` instance fits.
 */

/** A connected (or lazily connecting) Redis client. */
export interface RedisClientLike {
  evalsha(sha1: string, numkeys: number, ...args: (string | number)[]): Promise<unknown>;
  eval(script: string, numkeys: number, ...args: (string | number)[]): Promise<unknown>;
  quit(): Promise<unknown>;
}

/** Options the publisher passes when it creates the client itself. */
export interface RedisConstructorOptions {
  lazyConnect: boolean;
  maxRetriesPerRequest: number;
  connectTimeout: number;
  connectionName: string;
}

/** The `ioredis` module, as far as the publisher uses it. */
export interface RedisModuleLike {
  Redis: new (
    url: string,
    options: RedisConstructorOptions,
  ) => RedisClientLike & {
    on(event: string, listener: (error: Error) => void): unknown;
  };
}
