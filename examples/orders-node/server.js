// server.js — the orders API as a process:
//   node server.js --listen 127.0.0.1:3000 --gateway http://127.0.0.1:8080 [--table orders] [--queue-delay-ms 3000]
// PostgreSQL from DATABASE_URL; proofs verified against <gateway>/v1/proof/keys.
import { parseArgs } from 'node:util';
import pg from 'pg';
import { createApp, pgStore, KeySet } from './app.js';

const { values: o } = parseArgs({
  options: {
    listen: { type: 'string', default: '127.0.0.1:3000' },
    gateway: { type: 'string', default: 'http://127.0.0.1:8080' },
    table: { type: 'string', default: 'orders' },
    'queue-delay-ms': { type: 'string', default: '3000' },
  },
});
if (!process.env.DATABASE_URL) throw new Error('DATABASE_URL is not set');
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 20 });
const store = await pgStore(pool, o.table);
const proofs = o.gateway ? new KeySet(`${o.gateway}/v1/proof/keys`) : undefined;
const { app } = createApp({ store, proofs, queueDelayMs: Number(o['queue-delay-ms']) });
const [host, port] = o.listen.split(/:(?=\d+$)/);
app.listen(Number(port), host, () => console.log(`orders ready on ${o.listen}`));
