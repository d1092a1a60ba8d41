/**
 * `defineFunction`: a function's declaration (its kinds, each with the schema of its data,
 * its re-check, removal and read-back; one `observe`) made into what the run loop calls.
 * Targets are built through the context, so their data is checked when they are built and
 * once more, per target, when they are dispatched; nothing downstream casts.
 */
import type { z } from 'zod';
import type { Indeterminate, SourceMeta, Target } from '../engine/types.ts';
import { issuesText } from '../errors.ts';
import type {
  FunctionSpec,
  KindSpec,
  Marks,
  ObserveContext,
  SingleKind,
  TargetInit,
  TwopassFunction,
  Verdict,
} from './kinds.ts';
import {
  type BatchItemResult,
  type ConnectContext,
  type FunctionContext,
  type FunctionDefaults,
  KEEP_MARK,
  type Observation,
  type Removed,
  type RunContext,
  type Typed,
} from './run.ts';
import type { ParsedSettings } from './settings.ts';

export function keepMarked(marks: readonly Marks[] | undefined): boolean {
  for (const m of marks ?? []) {
    const v = m.annotations?.[KEEP_MARK];
    if (v !== undefined && v !== 'false') return true;
    if (m.tags?.includes(KEEP_MARK)) return true;
  }
  return false;
}

const issueText = (e: z.ZodError) => issuesText(e, { root: '(data)', inline: true });

/**
 * The target with its data checked against its kind, or why it cannot be dispatched:
 * checked once per target object (its batch key, re-check, removal, read-back and Event
 * all dispatch the same object).
 */
type Dispatched<R, W, S> = { kind: KindSpec<unknown, R, W, S>; target: Typed<unknown> } | { error: string };

function dispatcher<R, W, S>(name: string, kindOf: (k: string) => KindSpec<unknown, R, W, S> | undefined) {
  const dispatched = new WeakMap<Target, Dispatched<R, W, S>>();
  const dispatch = (t: Target): Dispatched<R, W, S> => {
    let d = dispatched.get(t);
    if (d) return d;
    const kind = kindOf(t.kind);
    if (!kind) d = { error: `${name} has no target kind ${t.kind}` };
    else if (t.data === undefined) d = { error: 'target has no removal data' };
    else {
      const r = kind.data.safeParse(t.data);
      d = r.success
        ? { kind, target: { ...t, data: r.data } }
        : { error: `target data does not fit kind ${t.kind}: ${issueText(r.error)}` };
    }
    dispatched.set(t, d);
    return d;
  };
  /** A target of a single kind; a batched kind's are removed by their batch, never alone. */
  const single = (
    t: Target,
  ): { kind: SingleKind<unknown, R, W, S>; target: Typed<unknown> } | { error: string } => {
    const d = dispatch(t);
    if ('error' in d) return d;
    if (d.kind.batch !== undefined) return { error: `kind ${t.kind} is removed by its batch, never alone` };
    return { kind: d.kind, target: d.target };
  };
  return { dispatch, single };
}

/** What the report and the decision read of the kinds: their graces, notes and words; the batches they share. */
function kindTables<R, W, S>(
  kinds: Readonly<Record<string, KindSpec<unknown, R, W, S>>>,
  defaults: FunctionDefaults,
) {
  const kindGraceMs: Record<string, number> = { ...(defaults.kindGraceMs ?? {}) };
  const kindNotes: Record<string, string> = {};
  const kindReport: Record<string, { unused: string; removal: string }> = {};
  for (const [name, k] of Object.entries(kinds)) {
    if (k.graceMs !== undefined) kindGraceMs[name] = k.graceMs;
    if (k.note !== undefined) kindNotes[name] = k.note;
    kindReport[name] = { unused: k.unused, removal: k.removal };
  }
  // Kinds that share a BatchSpec are batched together: the spec's identity is part of the key.
  const batchIds = new Map<object, number>();
  for (const k of Object.values(kinds))
    if (k.batch && !batchIds.has(k.batch)) batchIds.set(k.batch, batchIds.size);

  return { kindGraceMs, kindNotes, kindReport, batchIds };
}

/**
 * The targets of one observation as they are built, each with its handle. A target's data
 * is checked and attached at the end, and only to targets not in use: only those can be
 * removed (or reported). At 150,000 targets the data of the rest would be a third of the
 * snapshot's memory, and checking it with its schema (a copy each) took 0.5-1 s of a
 * 300,000-target run.
 */
function targetBook<S, R, W>(
  name: string,
  kindOf: (k: string) => KindSpec<unknown, R, W, S> | undefined,
  ctx: RunContext<S>,
) {
  // A hole: a target in use that is only counted (decision 0017).
  const targets: (Target | undefined)[] = [];
  const data: unknown[] = [];
  const used: string[] = [];
  const indeterminate: Indeterminate[] = [];
  let counted = 0;
  const build = (kind: string, init: Omit<TargetInit<unknown>, 'data'>): Target => ({
    key: init.key,
    kind,
    fingerprint: init.fingerprint,
    name: init.name,
    keep: keepMarked(init.marks),
    ...(init.createdAt !== undefined ? { createdAt: init.createdAt } : {}),
    ...(init.note !== undefined ? { note: init.note } : {}),
  });
  // Only a target the decision reads nothing of but its use may be dropped: not keep-marked
  // (counted as kept), not a stored candidate (rescued, with an event). Its key stays in
  // `used`, so that another target of the same key is in use as well.
  const countable = (t: Target) => ctx.countUsed === true && !t.keep && ctx.previous?.(t.key) === undefined;

  const target = (kindName: string, init: TargetInit<unknown>): Verdict => {
    if (!kindOf(kindName)) throw new Error(`${name}: target kind ${kindName} is not declared`);
    const i = targets.push(build(kindName, init)) - 1;
    data[i] = init.data;
    let undecided = false;
    return {
      used: () => {
        used.push(init.key);
        data[i] = undefined;
        const t = targets[i];
        if (t && !undecided && countable(t)) {
          targets[i] = undefined;
          counted++;
        }
      },
      indeterminate: (reason) => {
        undecided = true;
        indeterminate.push({ key: init.key, reason });
        // said undecided after it was counted in use: held again (undecided wins over used)
        if (targets[i] === undefined) {
          targets[i] = build(kindName, init);
          counted--;
        }
      },
    };
  };
  const unreadable = (kindName: string, init: Omit<TargetInit<unknown>, 'data'>, reason: string) => {
    targets.push(build(kindName, init));
    indeterminate.push({ key: init.key, reason });
  };
  /** The targets held, each not in use with its checked data; the counted; the keys in use; the undecided. */
  const done = () => {
    const kept: Target[] = [];
    for (const [i, t] of targets.entries()) {
      if (t === undefined) continue;
      const d = data[i];
      if (d === undefined) {
        kept.push(t);
        continue;
      }
      const r = kindOf(t.kind)!.data.safeParse(d);
      // A bug, not bad input: the function built data its own kind does not accept.
      if (!r.success) throw new Error(`${name}: ${t.kind} ${t.key}: ${issueText(r.error)}`);
      kept.push({ ...t, data: r.data });
    }
    return { targets: kept, ...(counted > 0 ? { counted } : {}), used, indeterminate };
  };
  return { target, unreadable, done };
}

/**
 * A function's observe, run with the context it builds targets through: its sources, its
 * targets (data only on those not in use), and what it said of them.
 */
async function collect<S, R, W, K extends Record<string, unknown>>(
  name: string,
  kindOf: (k: string) => KindSpec<unknown, R, W, S> | undefined,
  observe: (ctx: ObserveContext<S, K>) => Promise<void>,
  ctx: RunContext<S>,
): Promise<Observation> {
  const sources: SourceMeta[] = [];
  const blockers: string[] = [];
  const holds: string[] = [];
  const book = targetBook(name, kindOf, ctx);
  const octx: ObserveContext<S, K> = {
    ...ctx,
    source: (name, role, list) => {
      if ('notServed' in list) {
        sources.push({ name, role, count: 0, complete: true, reason: 'not served' });
        return;
      }
      sources.push({
        name,
        role,
        count: list.items.length,
        ...(list.resourceVersion !== undefined ? { listVersion: list.resourceVersion } : {}),
        ...(list.pages !== undefined ? { pages: list.pages } : {}),
        complete: true,
      });
    },
    target: book.target,
    unreadable: book.unreadable,
    blocker: (reason) => void blockers.push(reason),
    hold: (reason) => void holds.push(reason),
  };
  await observe(octx);
  return {
    sources,
    ...book.done(),
    ...(blockers.length ? { blockers } : {}),
    ...(holds.length ? { holds } : {}),
  };
}

/** One batch's steps, from the targets that dispatch to its kind's batch; the others refused. */
function batchSteps<R, W, S>(
  dispatch: (t: Target) => Dispatched<R, W, S>,
  batch: KindSpec<unknown, R, W, S>['batch'],
  reader: R,
  ts: readonly Target[],
  ctx: RunContext<S>,
) {
  const typed: Typed<unknown>[] = [];
  const refused: BatchItemResult[] = [];
  for (const t of ts) {
    const d = dispatch(t);
    if ('error' in d) refused.push({ key: t.key, outcome: 'skipped', reason: d.error });
    else if (d.kind.batch !== batch)
      refused.push({
        key: t.key,
        outcome: 'skipped',
        reason: `kind ${t.kind} is not batched with ${ts[0]?.kind}`,
      });
    else typed.push(d.target);
  }
  if (!batch || typed.length === 0) return { steps: [], targets: [], refused };
  return { steps: batch.steps(reader, typed, ctx), targets: typed, refused };
}

/** Builds the run loop's view of a function from its declaration. */
export function defineFunction<S extends z.ZodObject, R, W, K extends Record<string, unknown>>(
  spec: FunctionSpec<S, R, W, K>,
): TwopassFunction<R, W> {
  type Settings = z.output<S>;
  type AnyKind = KindSpec<unknown, R, W, Settings>;
  const kinds = spec.kinds as unknown as Readonly<Record<string, AnyKind>>;
  const kindOf = (name: string): AnyKind | undefined =>
    Object.hasOwn(kinds, name) ? kinds[name] : undefined;

  // Parsed once where the config loaded (the runtime's validateSettings, the only maker of
  // ParsedSettings), by this function's own schema: handed down as they are.
  const settingsOf = (parsed: ParsedSettings): Settings => parsed as unknown as Settings;
  const typedCtx = (ctx: FunctionContext): RunContext<Settings> => ({
    ...ctx,
    settings: settingsOf(ctx.settings),
  });

  const { dispatch, single } = dispatcher(spec.name, kindOf);
  const { kindGraceMs, kindNotes, kindReport, batchIds } = kindTables(kinds, spec.defaults);

  return {
    name: spec.name,
    description: spec.description,
    defaults: { ...spec.defaults, ...(Object.keys(kindGraceMs).length ? { kindGraceMs } : {}) },
    kindNotes,
    kindReport,
    settingsSchema: spec.settings,
    access: spec.access,
    ...(spec.maxConcurrency !== undefined ? { maxConcurrency: spec.maxConcurrency } : {}),
    ...(spec.reportOnly ? { reportOnly: true } : {}),
    ...(spec.connect
      ? { connect: (ctx: ConnectContext) => spec.connect!({ ...ctx, settings: settingsOf(ctx.settings) }) }
      : {}),

    observe: (reader, raw) =>
      collect(
        spec.name,
        kindOf,
        (octx: ObserveContext<Settings, K>) => spec.observe(reader, octx),
        typedCtx(raw),
      ),

    async recheck(reader, t, ctx) {
      const d = single(t);
      if ('error' in d) return { ok: false, reason: d.error };
      return d.kind.recheck(reader, d.target, typedCtx(ctx));
    },
    async remove(writer, t, ctx) {
      const d = single(t);
      if ('error' in d) return { outcome: 'skipped', reason: d.error };
      return d.kind.remove(writer, d.target, typedCtx(ctx));
    },
    async confirmGone(reader, t, ctx) {
      const d = single(t);
      // Data that cannot be dispatched cannot be read back either: not proven gone.
      if ('error' in d) return false;
      return d.kind.confirmGone(reader, d.target, typedCtx(ctx));
    },
    touchesOf(t) {
      const d = dispatch(t);
      // Data that cannot be dispatched declares nothing: none of its writes gets through.
      return 'error' in d ? [] : d.kind.touches(d.target.data);
    },
    batchOf(t) {
      const kind = kindOf(t.kind);
      if (!kind?.batch) return undefined;
      const d = dispatch(t);
      if ('error' in d) return undefined;
      return `${batchIds.get(kind.batch)}/${kind.batch.key(d.target.data)}`;
    },
    stepsOf: (reader, ts, ctx) =>
      batchSteps(dispatch, kindOf(ts[0]?.kind ?? '')?.batch, reader, ts, typedCtx(ctx)),
    placeOf(t) {
      const d = dispatch(t);
      if ('error' in d) return '';
      if (d.kind.place) return d.kind.place(d.target.data);
      const ns = (d.target.data as { namespace?: unknown } | null)?.namespace;
      return typeof ns === 'string' ? ns : '';
    },
    async restore(reader, writer, tomb, ctx) {
      const kind = kindOf(tomb.kind);
      if (!kind) return { outcome: 'refused', reason: `${spec.name} has no kind ${tomb.kind}` };
      if (!kind.restore) return { outcome: 'refused', reason: `a ${tomb.kind} cannot be restored` };
      return kind.restore(reader, writer, tomb, { ...typedCtx(ctx), apply: ctx.apply });
    },
    eventFor(removed) {
      const first = removed[0];
      if (!first) return undefined;
      const kind = kindOf(first.target.kind);
      if (!kind?.event) return undefined;
      const typed: Removed<unknown>[] = [];
      for (const r of removed) {
        const d = dispatch(r.target);
        if (!('error' in d)) typed.push({ target: d.target, detail: r.detail });
      }
      return typed.length ? kind.event(typed) : undefined;
    },
  };
}
