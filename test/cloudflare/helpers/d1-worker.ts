import type { D1Db } from '../../../src/cloudflare/index.js';
import { handleD1Request } from './http-d1.js';

/** A Worker that only serves its D1 bindings over HTTP (`?binding=NAME`, default `DB`). */
export default {
  fetch(request: Request, env: Record<string, D1Db>): Promise<Response> {
    const binding = new URL(request.url).searchParams.get('binding') ?? 'DB';
    return handleD1Request(request, env[binding]!);
  },
};
