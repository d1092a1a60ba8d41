/**
 * A test-only function over an in-memory world: "things" (targets) and "users"
 * (evidence). It records every write, like sample-controller's fixture, and lets a
 * test inject faults per call. It is built on the contract alone: no cast, and no
 * code outside this folder but the contract module.
 */
import { z } from 'zod';
import { defineFunction, MINUTE } from '../../../shared/contract/index.ts';

export type Thing = { id: string; version: number; createdAt?: number; keep?: boolean };
export type World = {
  things: Map<string, Thing>;
  users: Map<string, string>; // user id -> thing id
  writes: string[];
  faults: Partial<Record<'observe' | 'recheck' | 'remove' | 'confirm', () => void>>;
  /** remove() reports success but leaves the thing (like a 200 that did nothing). */
  lyingDelete?: boolean;
  /** remove()'s answer shows the thing gone (as a DELETE's answer naming its UID does). */
  answerShowsGone?: boolean;
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

const thingData = z.object({ id: z.string().min(1), version: z.number().int() });

export function memFunction() {
  return defineFunction<z.ZodObject, World, World, { Thing: z.output<typeof thingData> }>({
    name: MEM,
    description: 'test-only things',
    access: { cluster: [] },
    settings: z.object({}).strict(),
    defaults: {
      schedule: '* * * * *',
      graceMs: 10 * MINUTE,
      maxDeletions: 100,
      maxDeletionPercent: 100,
      maxEvidenceDropPercent: 100,
    },
    kinds: {
      Thing: {
        data: thingData,
        unused: 'no user holds it',
        removal: 'delete it from the world',
        // the world is not a port the runtime guards: the declaration is the thing itself
        touches: (d) => [{ object: `mem:things/${d.id}` }],
        async recheck(w, { data }) {
          w.faults.recheck?.();
          if (!w.things.has(data.id)) return { ok: false, reason: 'gone' };
          if ([...w.users.values()].includes(data.id)) return { ok: false, reason: 'in use' };
          return { ok: true };
        },
        async remove(w, { data }) {
          w.faults.remove?.();
          const thing = w.things.get(data.id);
          if (!thing) return { outcome: 'gone' };
          // The precondition: the version the snapshot saw (typed: no cast).
          if (thing.version !== data.version)
            return { outcome: 'skipped', reason: 'precondition failed (409)' };
          w.writes.push(`delete ${data.id}`);
          if (!w.lyingDelete) w.things.delete(data.id);
          return w.answerShowsGone ? { outcome: 'deleted', shownGone: true } : { outcome: 'deleted' };
        },
        async confirmGone(w, { data }) {
          w.faults.confirm?.();
          return !w.things.has(data.id);
        },
      },
    },
    async observe(w, ctx) {
      w.faults.observe?.();
      const things = [...w.things.values()];
      ctx.source('things', 'target', { items: things });
      const verdicts = new Map(
        things.map((t) => [
          t.id,
          ctx.target('Thing', {
            key: t.id,
            fingerprint: `${t.id}@${t.version}`,
            name: `thing ${t.id}`,
            marks: t.keep ? [{ annotations: { 'twopass.io/keep': 'true' } }] : [],
            createdAt: t.createdAt,
            data: { id: t.id, version: t.version },
          }),
        ]),
      );
      w.between?.();
      ctx.source('users', 'evidence', { items: [...w.users.keys()] });
      for (const id of new Set(w.users.values())) verdicts.get(id)?.used();
    },
  });
}
