// The PostgreSQL commit helper for node-postgres (pg), with pgfence's
// statements: the same files (fenceguard/pgfence/*.sql), bundled at build.
import { formatFence, parseFence } from './fence.js';
import type { Result } from './guard.js';
import { sources } from './sources.generated.js';

/** What pg.Client, pg.PoolClient and pg.Pool share. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: Record<string, unknown>[]; rowCount: number | null }>;
}

/** A pg.Pool: Commit takes one connection for its transaction. */
export interface Connectable {
  connect(): Promise<Queryable & { release(err?: Error | boolean): void }>;
}

/** The table of last fences per key FenceTable uses by default. */
export const DEFAULT_TABLE = 'fencegate_resource_fences';
/** SQLSTATEs of the recipe's trigger: a lower fence, no fence. */
export const STALE_SQLSTATE = 'FG409';
export const MISSING_SQLSTATE = 'FG428';
/** The SQL-only recipe (fenceguard/pgfence/recipe.sql). */
export const RECIPE_SQL: string = sources['fenceguard/pgfence/recipe.sql']!;

/** isStale: err is the recipe's trigger refusing a lower fence. */
export function isStale(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === STALE_SQLSTATE;
}

/** NoRowError: FenceColumn.update found no row with the id. */
export class NoRowError extends Error {
  constructor() {
    super('fencegate pg: no row with that id');
    this.name = 'NoRowError';
  }
}

/** ident quotes a possibly schema-qualified name ("app.orders") as pgx does. */
export function ident(name: string): string {
  return name
    .split('.')
    .map((p) => '"' + p.replaceAll('\0', '').replaceAll('"', '""') + '"')
    .join('.');
}

function stmt(file: string, slots: Record<string, string>): string {
  const s = sources[`fenceguard/pgfence/${file}`];
  if (s === undefined) throw new Error(`fencegate pg: missing statement ${file}`);
  // One pass, as Go's strings.Replacer: a slot's value is never re-read.
  return s.replace(/\{\{(table|id|fence|set)\}\}/g, (m, k: string) => slots[k] ?? m).replace(/\n$/, '');
}

function fenceArg(fence: string): number {
  const n = parseFence(fence);
  if (n === undefined) throw new RangeError(`fencegate pg: fence ${JSON.stringify(fence)}: want 15 digits, at least 1`);
  return n;
}

/**
 * FenceTable is a table of last fences per key (key text primary key,
 * fence bigint): for resources that cannot carry a column.
 */
export class FenceTable {
  readonly name: string;
  constructor(name: string = DEFAULT_TABLE) {
    this.name = name;
  }

  /** create creates the table if it does not exist. */
  async create(q: Queryable): Promise<void> {
    await q.query(stmt('table_create.sql', { table: ident(this.name) }));
  }

  /**
   * claim moves key's stored fence up to fence inside the caller's
   * transaction tx (on one connection, after BEGIN), or reports the
   * higher one stored. It locks the key's row until tx ends: write in tx
   * after an applied claim, roll back when it is not.
   */
  async claim(tx: Queryable, key: string, fence: string): Promise<Result> {
    const n = fenceArg(fence);
    const table = ident(this.name);
    const r = await tx.query(stmt('table_claim.sql', { table }), [key, n]);
    if (r.rows.length > 0) return { applied: true, fence, stored: formatFence(String(r.rows[0]!.fence)) };
    const s = await tx.query(stmt('table_stored.sql', { table }), [key]);
    if (s.rows.length === 0) throw new Error('fencegate pg: the stored fence vanished');
    return { applied: false, fence, stored: formatFence(String(s.rows[0]!.fence)) };
  }

  /**
   * commit runs write in a transaction that first claims key under fence:
   * when a higher fence is stored write does not run; otherwise the fence
   * and the write commit together. A throwing write rolls both back.
   */
  async commit<T>(pool: Connectable, key: string, fence: string, write: (tx: Queryable) => Promise<T>): Promise<Result & { value?: T }> {
    fenceArg(fence);
    const c = await pool.connect();
    let broken: Error | undefined;
    try {
      await c.query('BEGIN');
      try {
        const res = await this.claim(c, key, fence);
        if (!res.applied) {
          await c.query('ROLLBACK');
          return res;
        }
        const value = await write(c);
        await c.query('COMMIT');
        return { ...res, value };
      } catch (e) {
        await c.query('ROLLBACK').catch((re: Error) => {
          broken = re;
        });
        throw e;
      }
    } finally {
      c.release(broken);
    }
  }
}

export interface ColumnOptions {
  /** The table, optionally schema-qualified. */
  table: string;
  /** The id column (default "id"). */
  id?: string;
  /** The fence column (default "fence"), bigint, NULL for rows never fenced. */
  fence?: string;
}

/** FenceColumn is a fence column on the resource's own row. */
export class FenceColumn {
  readonly #table: string;
  readonly #id: string;
  readonly #fence: string;
  constructor(o: ColumnOptions) {
    this.#table = ident(o.table);
    this.#id = ident(o.id ?? 'id');
    this.#fence = ident(o.fence ?? 'fence');
  }

  /**
   * update runs, as one statement, UPDATE <table> SET <set>, <fence> = $1
   * WHERE <id> = $2 AND (<fence> IS NULL OR <fence> <= $1). set is SQL the
   * program writes (never request input) with its own parameters from $3.
   * Throws NoRowError when no row has the id.
   */
  async update(q: Queryable, id: unknown, fence: string, set: string, ...args: unknown[]): Promise<Result> {
    const n = fenceArg(fence);
    const slots = { table: this.#table, id: this.#id, fence: this.#fence, set };
    const r = await q.query(stmt('column_update.sql', slots), [n, id, ...args]);
    if ((r.rowCount ?? 0) > 0) return { applied: true, fence, stored: fence };
    // Not applied: no row, or a higher fence; this read only names it.
    const s = await q.query(stmt('column_stored.sql', slots), [id]);
    if (s.rows.length === 0) throw new NoRowError();
    const v = Object.values(s.rows[0]!)[0];
    return { applied: false, fence, stored: v === null || v === undefined ? '' : formatFence(String(v)) };
  }
}
