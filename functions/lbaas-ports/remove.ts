import { z } from 'zod';
import {
  type BatchResults,
  type KindSpec,
  keepMarked,
  messageOf,
  openStackObject,
  type RecheckResult,
  type RemovedPart,
  type RemoveResult,
  type RunContext,
  type Step,
  type Typed,
} from '../../shared/contract/index.ts';
import { noRestoreFacts, openStackResourcePayload, readPayload } from '../../shared/contract/tombstone.ts';
import { SERVICES } from '../../shared/kube/resources.ts';
import type { FloatingIp, Port } from '../../shared/openstack/neutron.ts';
import { restorePort } from '../../shared/openstack/restore.ts';
import { type ControllerState, controllerState, RUNNING_LINE } from './controller.ts';
import {
  type LbaasReader,
  type LbaasWriter,
  MANAGED_TAG,
  type PortData,
  portData,
  type ServiceEvidence,
  type Settings,
  serviceEvidence,
  serviceView,
  usedBy,
} from './model.ts';
export type Ctx = RunContext<Settings>;

/** Re-reads the port and its floating IP and judges them against `ev` (a fresh list of Services). */
export async function recheckPort(
  r: LbaasReader,
  d: PortData,
  ev: ServiceEvidence,
  ctx: Ctx,
): Promise<RecheckResult> {
  const scopeTag = ctx.settings.scopeTag;
  const p = await r.neutron.getPort(d.portId, ctx.signal);
  if (!p) return { ok: false, reason: 'port is already gone' };
  if (p.revision_number !== d.revision)
    return { ok: false, reason: `port changed (revision ${d.revision} -> ${p.revision_number})` };
  if (!p.tags?.includes(MANAGED_TAG) || (scopeTag && !p.tags.includes(scopeTag)))
    return { ok: false, reason: 'port lost its tags' };
  if (keepMarked([{ tags: p.tags }])) return { ok: false, reason: 'port carries the keep-mark' };
  if ((p.device_id ?? '') !== d.deviceId) return { ok: false, reason: 'port has a new device' };
  let fip: FloatingIp | undefined;
  if (d.fip) {
    fip = await r.neutron.getFloatingIp(d.fip.id, ctx.signal);
    if (fip && (fip.port_id !== d.portId || fip.revision_number !== d.fip.revision))
      return { ok: false, reason: 'its floating IP changed' };
  }
  const use = usedBy(ev, d);
  if (use) return { ok: false, reason: use };
  if (ev.placing.length && ctx.settings.controller !== 'none')
    return { ok: false, reason: `Service ${ev.placing[0]} is being placed` };
  // The port and its floating IP as just read: their tombstone.
  return {
    ok: true,
    before: { port: p, ...(fip ? { floatingIp: fip } : {}) } satisfies z.input<typeof LBAAS_TOMBSTONE.object>,
  };
}

/** A port's tombstone: the port and its floating IP, as read just before the deletion. */
export const LBAAS_TOMBSTONE = {
  object: z.object({ port: openStackResourcePayload, floatingIp: openStackResourcePayload.optional() }),
  restore: noRestoreFacts,
};

/**
 * The floating IP of a deleted port: re-read, and deleted only if it is now unassociated,
 * still managed and not keep-marked, with If-Match on the revision just read (deleting the
 * port disassociated it, which gave it a new revision).
 */
export async function removeFip(
  unit: LbaasUnit,
  fip: NonNullable<PortData['fip']>,
  ctx: Ctx,
): Promise<RemovedPart> {
  const part = { kind: 'FloatingIP', key: fip.id, name: `${fip.address ?? '?'} (${fip.id})` };
  const left = (why: string): RemovedPart => ({
    ...part,
    outcome: 'left',
    detail: `floating IP left: ${why} (its port was deleted; later runs report it as unassociated)`,
  });
  try {
    const f = await unit.r.neutron.getFloatingIp(fip.id, ctx.signal);
    if (!f) return { ...part, outcome: 'gone', detail: 'floating IP was already gone' };
    if (f.port_id) return left(`it is on port ${f.port_id} now`);
    if (!f.tags?.includes(MANAGED_TAG)) return left('it lost the managed tag');
    if (keepMarked([{ tags: f.tags }])) return left('it carries the keep-mark');
    if ((f.floating_ip_address ?? undefined) !== fip.address) return left('its address changed');
    if (unit.conditional && f.revision_number === undefined) return left('it has no revision_number');
    const out = await unit.w.neutron.deleteFloatingIp(
      fip.id,
      unit.conditional ? f.revision_number : undefined,
      ctx.signal,
    );
    if (out === 'conflict') return left('it changed between its read and its delete (412)');
    if (out === 'gone') return { ...part, outcome: 'gone', detail: 'floating IP was already gone' };
    return {
      ...part,
      outcome: 'deleted',
      detail: `floating IP ${fip.address ?? fip.id} deleted (unassociated since its port was deleted)`,
    };
  } catch (err) {
    return {
      ...part,
      outcome: 'failed',
      detail: `floating IP left: ${(err as Error).message} (its port was deleted; later runs report it as unassociated, delete it by hand)`,
    };
  }
}

export type LbaasUnit = Readonly<{ r: LbaasReader; w: LbaasWriter; conditional: boolean }>;

/**
 * One unit: the port first, under its If-Match (a port changed since the re-check is skipped
 * and keeps its floating IP), then, once a read shows the port gone, its floating IP.
 */
export async function removeUnit(
  r: LbaasReader,
  w: LbaasWriter,
  d: PortData,
  ctx: Ctx,
): Promise<RemoveResult> {
  const unit: LbaasUnit = { r, w, conditional: d.conditional };
  const out = await w.neutron.deletePort(d.portId, d.conditional ? d.revision : undefined, ctx.signal);
  if (out === 'conflict')
    return {
      outcome: 'skipped',
      reason: `precondition failed (412): the port changed${d.fip ? '; its floating IP was not touched' : ''}`,
    };
  if (out === 'gone')
    return {
      outcome: 'gone',
      detail: 'port was already gone',
      ...(d.fip
        ? {
            parts: [
              {
                kind: 'FloatingIP',
                key: d.fip.id,
                name: `${d.fip.address ?? '?'} (${d.fip.id})`,
                outcome: 'left' as const,
                detail: 'floating IP left: its port was deleted by someone else, who owns it',
              },
            ],
          }
        : {}),
    };
  if (await r.neutron.getPort(d.portId, ctx.signal))
    throw new Error(
      'the server answered deleted but a read still finds the port; its floating IP was not touched',
    );
  const parts = d.fip ? [await removeFip(unit, d.fip, ctx)] : [];
  return { outcome: 'deleted', detail: `port ${d.portId} deleted`, parts };
}

/** Fresh Services, listed just before a group's deletes: the controller may hand a cached port to a new Service at any time. */
export async function freshServices(r: LbaasReader, ctx: Ctx): Promise<ServiceEvidence> {
  return serviceEvidence((await r.kube.listAll(SERVICES, { signal: ctx.signal, view: serviceView })).items);
}

/** The controller, read fresh; a read that fails counts as running (doubt deletes nothing). */
async function controllerNow(r: LbaasReader, ctx: Ctx): Promise<ControllerState> {
  try {
    return await controllerState(r.kube, ctx.settings.controller, ctx.signal);
  } catch (err) {
    return { running: true, detail: `it cannot be told whether it runs: ${messageOf(err)}` };
  }
}

/**
 * Every confirmed port of the run, in groups of `concurrency`, one step each, which the
 * runtime runs: each group is re-checked against one fresh list of Services (read when the
 * group begins), and each port, right before its DELETE, against a fresh read of the
 * controller (the gate: a running controller holds it). After a group's DELETEs the
 * controller is read again: one that started meanwhile may have loaded a port whose DELETE
 * was in flight, so the run stops there and says to restart it.
 */
export function portSteps(
  _reader: LbaasReader,
  targets: readonly Typed<PortData>[],
  ctx: Ctx,
): readonly Step<PortData, LbaasReader, LbaasWriter>[] {
  const n = ctx.settings.concurrency;
  const steps: Step<PortData, LbaasReader, LbaasWriter>[] = [];
  for (let i = 0; i < targets.length; i += n) {
    const group = new Set(targets.slice(i, i + n).map((t) => t.key));
    let services: Promise<ServiceEvidence> | undefined;
    steps.push({
      takes: (t) => group.has(t.key),
      each: true,
      attempts: 1,
      async plan(r, [t]) {
        const port = t!;
        services ??= freshServices(r, ctx);
        const check = await recheckPort(r, port.data, await services, ctx);
        if (!check.ok)
          return {
            removing: [],
            results: [{ key: port.key, outcome: 'skipped', reason: `re-check: ${check.reason}` }],
          };
        return {
          removing: [{ target: port, object: check.before }],
          async gate() {
            const c = await controllerNow(r, ctx);
            return c.running ? `${RUNNING_LINE} (${c.detail})` : undefined;
          },
          write: (w) => removeUnit(r, w, port.data, ctx),
          readBack: async (_r, out) => ({
            results: [
              'unknown' in out
                ? { key: port.key, outcome: 'failed', error: out.unknown }
                : { key: port.key, ...(out.answer as RemoveResult) },
            ],
          }),
        };
      },
      after: (sent, results) => controllerAfter(_reader, sent, results, ctx),
    });
  }
  return steps;
}

/**
 * After a group's DELETEs: a controller that started meanwhile may hold what was deleted in
 * its memory, and its own cleanup may have sent the same DELETE (Neutron answers 204 to
 * both): the run stops, and those deletions are told as unproven.
 */
async function controllerAfter(
  r: LbaasReader,
  sent: readonly string[],
  results: BatchResults,
  ctx: Ctx,
): Promise<void> {
  if (sent.length === 0 || ctx.settings.controller === 'none') return;
  const after = await controllerNow(r, ctx);
  if (!after.running) return;
  const stopped = `the ch-k8s-lbaas controller started while ports were being deleted (${after.detail}): restart it so that it reloads its ports; until then it may hand a Service a port this run deleted`;
  for (const key of sent) {
    const res = results.get(key);
    if (res?.outcome === 'deleted')
      results.set({
        ...res,
        unproven: true,
        detail: `${res.detail ?? 'deleted'}; Neutron answered 204, but the controller was running by the time it was gone: it may hold the port as free, and its own cleanup may have deleted it at the same moment`,
      });
  }
  ctx.note('controller.started', { reason: stopped }, 'warn');
  ctx.stop?.(stopped);
}

export const portKind: KindSpec<PortData, LbaasReader, LbaasWriter, Settings> = {
  data: portData,
  unused:
    'no Service names it in its inbound-port annotation or has one of its addresses (fixed or floating) as load-balancer ingress, and no Service is being placed',
  removal:
    'DELETE the port with If-Match on the revision_number read (a changed port is skipped and keeps its floating IP); then re-read its floating IP and DELETE it, with If-Match, only if it is unassociated and still managed',
  touches: (d) => {
    // without If-Match only where Neutron offers none and the operator accepted it
    const free = d.conditional
      ? {}
      : { unconditional: 'Neutron offers no revision-if-match and unconditionalDeletes is set' };
    return [
      { object: openStackObject('neutron', 'ports', d.portId), ...free },
      ...(d.fip ? [{ object: openStackObject('neutron', 'floatingips', d.fip.id), ...free }] : []),
    ];
  },
  // The port with its fixed IPs and tags, and its floating IP with its address, only if free.
  async restore(_r, w, tomb, ctx) {
    const read = readPayload(tomb, LBAAS_TOMBSTONE);
    if (!read.ok) return { outcome: 'refused', reason: read.reason };
    const b = read.object;
    const res = await restorePort(w.neutron, b.port as Port, b.floatingIp as FloatingIp | undefined, ctx);
    if (res.outcome === 'refused') return res;
    return {
      ...res,
      detail: `${res.detail}. What a restore cannot give back: the port's id is new, so no Service's inbound-port annotation names it, and a running ch-k8s-lbaas controller adopts it only when it next starts (restart it)`,
    };
  },
  // Every port of a run in one batch: it deletes them in groups, each on fresh Services.
  batch: { key: () => 'ports', steps: portSteps },
};
