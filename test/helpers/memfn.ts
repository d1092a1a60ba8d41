/**
 * A test-only function over an in-memory world: "things" (targets) and
 * "users" (evidence). It records every write, like sample-controller's fixture,
 * and lets a test inject faults per call.
 */
import { Writable } from 'node:stream';
import type { Target } from '../../shared/engine/types.ts';
import { createLogger } from '../../shared/log/logger.ts';
import type {
  FunctionContext,
  Observation,
  RecheckResult,
  RemoveResult,
  TwopassFunction,
} from '../../shared/runtime/function.ts';

export type Thing = { id: string; version: number; createdAt?: number; keep?: boolean };
export type World = {
  things: Map<string, Thing>;
  users: Map<string, string>; // user id -> thing id
  writes: string[];
  faults: Partial<Record<'observe' | 'recheck' | 'remove' | 'confirm', () => void>>;
  /** remove() reports success but leaves the thing (like a 200 that did nothing). */
  lyingDelete?: boolean;
  /** Runs between observing targets and evidence (a race). */
  between?: () => void;
};

export function world(things: string[] = [], users: Record<string, string> = {}): World {
  return {
    things: new Map(things.map((id) => [id, { id, version: 1 }])),
    users: new Map(Object.entries(users)),
    writes: [],
    faults: {},
  };
}

export const MEM = 'mem-things';

export function memFunction(): TwopassFunction<World, World> {
  return {
    name: MEM,
    description: 'test-only things',
    defaults: {
      schedule: '* * * * *',
      graceMs: 10 * 60_000,
      maxDeletions: 100,
      maxDeletionPercent: 100,
      maxEvidenceDropPercent: 100,
    },
    async observe(w: World, _ctx: FunctionContext): Promise<Observation> {
      w.faults.observe?.();
      const targets: Target[] = [...w.things.values()].map((t) => ({
        key: t.id,
        kind: 'Thing',
        fingerprint: `${t.id}@${t.version}`,
        name: `thing ${t.id}`,
        keep: t.keep === true,
        ...(t.createdAt !== undefined ? { createdAt: t.createdAt } : {}),
        data: { version: t.version },
      }));
      w.between?.();
      const used = [...new Set(w.users.values())].filter((id) => w.things.has(id));
      return {
        sources: [
          { name: 'things', role: 'target', count: targets.length, complete: true },
          { name: 'users', role: 'evidence', count: w.users.size, complete: true },
        ],
        targets,
        used,
        indeterminate: [],
      };
    },
    async recheck(w: World, t: Target): Promise<RecheckResult> {
      w.faults.recheck?.();
      const thing = w.things.get(t.key);
      if (!thing) return { ok: false, reason: 'gone' };
      if ([...w.users.values()].includes(t.key)) return { ok: false, reason: 'in use' };
      return { ok: true };
    },
    async remove(w: World, t: Target): Promise<RemoveResult> {
      w.faults.remove?.();
      const thing = w.things.get(t.key);
      if (!thing) return { outcome: 'gone' };
      if (thing.version !== (t.data as { version: number }).version)
        return { outcome: 'skipped', reason: 'precondition failed (409)' };
      w.writes.push(`delete ${t.key}`);
      if (!w.lyingDelete) w.things.delete(t.key);
      return { outcome: 'deleted' };
    },
    async confirmGone(w: World, t: Target): Promise<boolean> {
      w.faults.confirm?.();
      return !w.things.has(t.key);
    },
  };
}

export function captureLog(clock: () => number) {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _e, cb) {
      for (const l of chunk.toString().split('\n'))
        if (l) lines.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  });
  const log = createLogger({ output: 'json', stream, clock });
  return { log, lines, events: (name: string) => lines.filter((l) => l.event === name) };
}
