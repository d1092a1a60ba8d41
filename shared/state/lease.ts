/**
 * LeaseLock: one coordination.k8s.io/v1 Lease per function (`twopass-<function>`).
 * Taken when absent, free or expired; renewed during the run; released at the end.
 * Every write carries the read resourceVersion, so two takers cannot both win.
 */
import { randomUUID } from 'node:crypto';
import { ConfigError } from '../errors.ts';
import { ConflictError, KubeApiError } from '../kube/errors.ts';
import type { KubeClient } from '../kube/ports.ts';
import { type KubeObject, LEASES } from '../kube/resources.ts';
import type { Time } from '../time.ts';
import { LockHeldError } from './errors.ts';
import type { Lock, LockHandle } from './store.ts';

type LeaseSpec = {
  holderIdentity?: string;
  leaseDurationSeconds?: number;
  acquireTime?: string;
  renewTime?: string;
  leaseTransitions?: number;
};
type Lease = KubeObject & { spec?: LeaseSpec };

export type LeaseLockOptions = Readonly<{
  namespace: string;
  identity?: string;
  durationSeconds?: number;
  /** The clock the Lease is written and judged by, and the renewal sleeps on. */
  time: Time;
  /** Renew period (default a third of the duration); 0 disables renewal (tests). */
  renewEveryMs?: number;
}>;

/** MicroTime as the API server wants it: RFC 3339 with microseconds. */
export function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

export class LeaseLock implements Lock {
  readonly description: string;
  readonly identity: string;
  private readonly kube: KubeClient;
  private readonly opts: LeaseLockOptions;
  constructor(kube: KubeClient, opts: LeaseLockOptions) {
    this.kube = kube;
    this.opts = opts;
    this.identity = opts.identity ?? `twopass-${randomUUID().slice(0, 8)}`;
    this.description = `lease:${opts.namespace}`;
  }

  private now(): number {
    return this.opts.time.now();
  }

  /** Creates the Lease, or takes it over when it is ours or expired; a held one, or one taken at the same time, is LockHeldError. */
  private async take(fn: string, existing: Lease | undefined, signal?: AbortSignal): Promise<Lease> {
    const name = `twopass-${fn}`;
    const duration = this.opts.durationSeconds ?? 60;
    const ns = this.opts.namespace;
    const nowMs = this.now();
    try {
      if (!existing) {
        return (await this.kube.create(
          LEASES,
          {
            apiVersion: 'coordination.k8s.io/v1',
            kind: 'Lease',
            metadata: { name, namespace: ns, labels: { 'app.kubernetes.io/managed-by': 'twopass' } },
            spec: {
              holderIdentity: this.identity,
              leaseDurationSeconds: duration,
              acquireTime: microTime(nowMs),
              renewTime: microTime(nowMs),
              leaseTransitions: 0,
            },
          },
          signal,
        )) as Lease;
      } else {
        const s = existing.spec ?? {};
        const renewed = s.renewTime ? Date.parse(s.renewTime) : Number.NaN;
        const expiresAt = renewed + (s.leaseDurationSeconds ?? duration) * 1000;
        const held =
          s.holderIdentity !== undefined && s.holderIdentity !== '' && s.holderIdentity !== this.identity;
        if (held && !(Number.isFinite(expiresAt) && nowMs >= expiresAt)) {
          throw new LockHeldError(
            `${fn}: Lease ${ns}/${name} is held by ${s.holderIdentity} until ${Number.isFinite(expiresAt) ? new Date(expiresAt).toISOString() : 'unknown'}`,
          );
        }
        return (await this.kube.replace(
          LEASES,
          {
            ...existing,
            spec: {
              holderIdentity: this.identity,
              leaseDurationSeconds: duration,
              acquireTime: microTime(nowMs),
              renewTime: microTime(nowMs),
              leaseTransitions: (s.leaseTransitions ?? 0) + (held ? 1 : 0),
            },
          },
          signal,
        )) as Lease;
      }
    } catch (err) {
      // The namespace of `--state configmap:NS` does not exist: a configuration error (exit 2).
      if (err instanceof KubeApiError && err.status === 404)
        throw new ConfigError(
          `--state configmap:${ns}: the namespace ${ns} does not exist (create it, or name another; the Lease and the state ConfigMaps live there)`,
          { cause: err },
        );
      if (
        err instanceof ConflictError ||
        (err instanceof KubeApiError && (err.status === 409 || err.reason === 'AlreadyExists'))
      ) {
        throw new LockHeldError(`${fn}: Lease ${ns}/${name} was taken by another run at the same time`, {
          cause: err,
        });
      }
      throw err;
    }
  }

  async acquire(fn: string, signal?: AbortSignal): Promise<LockHandle> {
    const name = `twopass-${fn}`;
    const duration = this.opts.durationSeconds ?? 60;
    const ns = this.opts.namespace;
    const existing = (await this.kube.get(LEASES, ns, name, signal)) as Lease | undefined;
    let current = await this.take(fn, existing, signal);
    // Read back: the Lease is ours only if the server says so now.
    const back = (await this.kube.get(LEASES, ns, name, signal)) as Lease | undefined;
    if (
      back?.spec?.holderIdentity !== this.identity ||
      back.metadata.resourceVersion !== current.metadata.resourceVersion
    )
      throw new LockHeldError(
        `${fn}: Lease ${ns}/${name} was written, but a read-back finds ${back ? `holder ${back.spec?.holderIdentity ?? 'none'}` : 'no Lease'}`,
      );
    const controller = new AbortController();
    const stop = new AbortController();
    const renewEvery = this.opts.renewEveryMs ?? (duration * 1000) / 3;
    const renewing =
      renewEvery > 0
        ? (async () => {
            for (;;) {
              try {
                await this.opts.time.sleep(renewEvery, stop.signal);
              } catch {
                return; // released
              }
              try {
                // not aborted by release: release waits for it and writes on its resourceVersion
                current = (await this.kube.replace(LEASES, {
                  ...current,
                  spec: { ...current.spec, renewTime: microTime(this.now()) },
                })) as Lease;
              } catch (err) {
                if (stop.signal.aborted) return;
                controller.abort(
                  new LockHeldError(`${fn}: lost Lease ${ns}/${name}: ${(err as Error).message}`),
                );
                return;
              }
            }
          })()
        : Promise.resolve();
    return {
      lost: controller.signal,
      release: async () => {
        stop.abort();
        await renewing;
        if (controller.signal.aborted) return;
        const { holderIdentity: _h, ...rest } = current.spec ?? {};
        await this.kube
          .replace(LEASES, { ...current, spec: { ...rest, renewTime: microTime(this.now()) } })
          .catch(() => undefined);
      },
    };
  }
}
