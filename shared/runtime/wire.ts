/**
 * Builds a run's dependencies from the parsed configuration: clients, state
 * store, lock, logger. Entry points (CLI, scheduler, FaaS handler) call this
 * once and then `run()`; nothing below reads the environment or the clock.
 */
import { randomUUID } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { type Config, functionConfig } from '../config.ts';
import type { AnyFunction, ParsedSettings, Ports } from '../contract/index.ts';
import type { Snapshot } from '../engine/types.ts';
import { ConfigError } from '../errors.ts';
import { type KubeClientOptions, KubeHttpClient, kubeOptionsFromConfig } from '../kube/client.ts';
import { KubeApiError } from '../kube/errors.ts';
import { recordEvent } from '../kube/events.ts';
import type { KubeClient } from '../kube/ports.ts';
import { apiVersionOf, CRONJOBS, JOBS, type KubeObject, NAMESPACES } from '../kube/resources.ts';
import type { Logger } from '../log/logger.ts';
import { notifyRun, type Webhook, webhookFrom } from '../notify/webhook.ts';
import { ensureDir } from '../paths.ts';
import { ConfigMapStateStore } from '../state/configmap.ts';
import { FileLock, FileStateStore } from '../state/file.ts';
import { LeaseLock } from '../state/lease.ts';
import type { Lock, StateStore } from '../state/store.ts';
import type { Time } from '../time.ts';
import { VERSION } from '../version.ts';
import { type Report, writeReport } from './report.ts';
import { type LogSink, type RunHooks, type RunRequest, type RunResult, run } from './run.ts';
import { checkKindGrace, validateSettings } from './settings.ts';

export type Environment = Readonly<{
  time: Time;
  log: Logger;
  /** Overrides the kubeconfig (tests and the sandbox). */
  kubeOptions?: Omit<KubeClientOptions, 'time'>;
  hooks?: RunHooks;
  /**
   * Wraps the Kubernetes client every call of a run goes through (state, Lease,
   * functions, Events): the interceptor the crash tests inject faults with.
   */
  intercept?: (kube: KubeClient) => KubeClient;
  /** Each list page as it arrives (a terminal's progress line). */
  onPage?: KubeClientOptions['onPage'];
  /** The process environment, for functions whose clients read OS_* (OpenStack). */
  processEnv?: Readonly<Record<string, string | undefined>>;
  /** Where the diff log goes, when it can be lost (the CLI's stdout). */
  logSink?: LogSink;
}>;

export async function connectKube(cfg: Config, env: Environment): Promise<KubeHttpClient> {
  let opts: Omit<KubeClientOptions, 'time'>;
  if (env.kubeOptions) opts = env.kubeOptions;
  else {
    try {
      opts = await kubeOptionsFromConfig(cfg.kubeconfig, cfg.context);
    } catch (err) {
      throw new ConfigError(
        `kubeconfig${cfg.kubeconfig ? ` ${cfg.kubeconfig}` : ''}: ${(err as Error).message}`,
        { cause: err },
      );
    }
  }
  return new KubeHttpClient({
    userAgent: `twopass/${VERSION}`,
    ...opts,
    time: env.time,
    callTimeoutMs: cfg.callTimeoutMs,
    pageSize: cfg.pageSize,
    // a run's lists are read in order, each not older than the one before (laws 1 and 2)
    freshLists: true,
    ...(env.onPage ? { onPage: env.onPage } : {}),
  });
}

export function stateFor(
  cfg: Config,
  kube: KubeClient | undefined,
  time: Time,
): { store: StateStore; lock: Lock } {
  if (cfg.state.kind === 'file')
    return {
      store: new FileStateStore(cfg.state.dir, time.now),
      lock: new FileLock(cfg.state.dir, time.now),
    };
  if (!kube) throw new ConfigError('--state configmap:NAMESPACE needs a Kubernetes connection');
  return {
    store: new ConfigMapStateStore(kube, cfg.state.namespace, undefined, time.now),
    lock: new LeaseLock(kube, {
      namespace: cfg.state.namespace,
      durationSeconds: cfg.leaseDurationSeconds,
      time,
    }),
  };
}

export type RunOptions = Readonly<{
  apply?: boolean;
  /** Accept the current evidence counts as the new baseline (a dry run that records). */
  acceptEvidence?: boolean;
  record?: boolean;
  saveSnapshotDir?: string;
  /** Where a report of the confirmed candidates goes (a dry run's, or one that needs approval). */
  reportFile?: string;
  /** `apply --from-report`: delete only what this report approved and is still confirmed. */
  approved?: Report;
  signal?: AbortSignal;
}>;

/** Runs one function end to end with clients built from the config. */
export async function runFunction(
  fn: AnyFunction,
  cfg: Config,
  env: Environment,
  options: RunOptions = {},
): Promise<RunResult> {
  const fc = functionConfig(cfg, fn.name, fn.defaults);
  const webhook = webhookFrom(cfg, env.processEnv ?? {});
  if (webhook && 'error' in webhook) throw new ConfigError(webhook.error);
  // Settings are checked before any I/O: a dropped key would widen the scope.
  checkKindGrace(fn, cfg.functions[fn.name]?.kindGrace, `config ${cfg.source}`);
  const settings = validateSettings(fn, { pageSize: cfg.pageSize, ...fc.settings }, `config ${cfg.source}`);
  const http = await connectKube(cfg, env);
  const sink = reportSink(fn.name, options.reportFile, fc.approval.reportDir, env.time);
  let clusterUid: string | undefined;
  try {
    if (options.approved && options.approved.cluster !== http.server)
      throw new ConfigError(
        `the report is of the cluster at ${options.approved.cluster}, this connection is to ${http.server}`,
      );
    // A report names its cluster by kube-system's UID as well as by URL: read only when a
    // report is written or applied, so a run without one needs no more than its role.
    if (options.approved || sink.report) clusterUid = await kubeSystemUid(http, options.signal);
    if (options.approved && options.approved.clusterUid !== clusterUid)
      throw new ConfigError(
        `the report is of the cluster whose kube-system namespace has UID ${options.approved.clusterUid}, this one's is ${clusterUid}: a report of another cluster (the same URL, as every in-cluster run sees it) is never applied here`,
      );
  } catch (err) {
    await http.close();
    throw err;
  }
  const kube = env.intercept ? env.intercept(http) : http;
  let ports: Ports<unknown, unknown> = { reader: kube, writer: kube, close: async () => {} };
  try {
    ports = await connectPorts(fn, kube, cfg, settings, env.processEnv ?? {}, env.time);
    const { store, lock } = stateFor(cfg, kube, env.time);
    const request: RunRequest = {
      apply: options.apply ?? fc.apply,
      record: options.record ?? fc.record,
      policy: fc.policy,
      settings,
      deadlineMs: cfg.deadlineMs,
      concurrency: cfg.concurrency,
      evidenceMaxAgeMs: cfg.evidenceMaxAgeMs,
      ...(options.acceptEvidence ? { acceptEvidence: true } : {}),
      ...(options.signal ? { signal: options.signal } : {}),
      cluster: http.server,
      ...(clusterUid !== undefined ? { clusterUid } : {}),
      ...(fc.approval.requiredAbove !== undefined ? { approvalAbove: fc.approval.requiredAbove } : {}),
      ...(options.approved ? { approved: options.approved } : {}),
      ...sink,
    };
    return await run(
      {
        fn,
        reader: ports.reader,
        writer: ports.writer,
        store,
        lock,
        time: env.time,
        log: env.log,
        newId: randomUUID,
        ...(options.saveSnapshotDir
          ? { saveSnapshot: (s: Snapshot) => saveSnapshot(options.saveSnapshotDir!, s) }
          : {}),
        ...(env.logSink ? { logSink: env.logSink } : {}),
        hooks: withNotify(
          withEvents(env.hooks, cfg, kube, env.time, env.processEnv ?? {}),
          webhook,
          env.log,
          env.time,
        ),
        recordEvent: async (note, signal) => {
          await recordEvent(
            kube,
            note.namespace,
            note.involved,
            note.reason,
            note.message,
            'Normal',
            env.time.now(),
            signal,
          );
        },
      },
      request,
    );
  } finally {
    await ports.close();
    await http.close();
  }
}

function reportSink(
  fn: string,
  file: string | undefined,
  dir: string | undefined,
  time: Time,
): Pick<RunRequest, 'report'> {
  const path =
    file ??
    (dir ? join(dir, `${fn}-${new Date(time.now()).toISOString().replace(/[:.]/g, '-')}.json`) : undefined);
  if (!path) return {};
  return {
    report: async (r) => {
      await writeReport(path, r);
      return path;
    },
  };
}

/**
 * The cluster's identity for a report: the UID of its `kube-system` namespace, which every
 * cluster has and no two share (the URL does not tell clusters apart in-cluster).
 */
async function kubeSystemUid(kube: KubeClient, signal: AbortSignal | undefined): Promise<string> {
  let ns: KubeObject | undefined;
  try {
    ns = await kube.get(NAMESPACES, undefined, 'kube-system', signal);
  } catch (err) {
    if (err instanceof KubeApiError && err.status === 403)
      throw new ConfigError(
        `reading the namespace kube-system (a report names its cluster by its UID) was refused: the function's role needs get on namespaces/kube-system (${err.message})`,
        { cause: err },
      );
    throw err;
  }
  const uid = ns?.metadata.uid;
  if (typeof uid !== 'string' || uid === '')
    throw new ConfigError(
      'the namespace kube-system is not there, or has no UID: a report names its cluster by it, and this server has none to give',
    );
  return uid;
}

/** A function's reader and writer ports: its own connect(), or the Kubernetes client for both. */
export async function connectPorts(
  fn: AnyFunction,
  kube: KubeClient,
  cfg: Config,
  settings: ParsedSettings,
  env: Readonly<Record<string, string | undefined>>,
  time: Time,
): Promise<Ports<unknown, unknown>> {
  if (!fn.connect) return { reader: kube, writer: kube, close: async () => {} };
  try {
    return await fn.connect({
      kube,
      settings,
      env,
      time,
      callTimeoutMs: cfg.callTimeoutMs,
      pageSize: cfg.pageSize,
    });
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    throw new ConfigError(`${fn.name}: ${(err as Error).message}`, { cause: err });
  }
}

/** After everything else a run does: its summary to the webhook (never fails or delays the run's work). */
function withNotify(hooks: RunHooks, webhook: Webhook | undefined, log: Logger, time: Time): RunHooks {
  if (!webhook) return hooks;
  return {
    ...hooks,
    finished: async (r) => {
      await hooks.finished?.(r);
      await notifyRun(webhook, r, log, (fn) => hooks.notifyFailed?.(fn), time);
    },
  };
}

const RUN_WARNINGS: Partial<Record<RunResult['outcome'], string>> = {
  refused: 'TwopassRunRefused',
  aborted: 'TwopassRunAborted',
  failed: 'TwopassRunFailed',
  locked: 'TwopassRunLocked',
  approval: 'TwopassApprovalRequired',
  held: 'TwopassDeletionsHeld',
};

/**
 * A run that did not end ok leaves a Warning Event (when eventNamespace is set) on the Job
 * it ran in (TWOPASS_JOB_NAME, from the pod's `batch.kubernetes.io/job-name` label) or else
 * on the function's CronJob, with the object's UID, so that `kubectl describe` shows it.
 */
function withEvents(
  hooks: RunHooks | undefined,
  cfg: Config,
  kube: KubeClient,
  time: Time,
  processEnv: Readonly<Record<string, string | undefined>>,
): RunHooks {
  const ns = cfg.eventNamespace;
  if (!ns) return hooks ?? {};
  return {
    ...hooks,
    finished: async (r) => {
      await hooks?.finished?.(r);
      const reason = RUN_WARNINGS[r.outcome];
      if (!reason) return;
      const job = processEnv.TWOPASS_JOB_NAME;
      const [ref, name] = job ? [JOBS, job] : [CRONJOBS, `twopass-${r.function}`];
      // Without the UID the Event is still written; describe then does not list it.
      const uid = await kube
        .get(ref, ns, name)
        .then((o) => o?.metadata.uid)
        .catch(() => undefined);
      const nothing =
        r.outcome === 'failed'
          ? 'some deletions failed'
          : r.deleted.length > 0
            ? `${r.deleted.length} deleted before it, ${r.held.length} held`
            : r.outcome === 'held'
              ? `${r.held.length} confirmed deletion(s) held, nothing was deleted`
              : 'nothing was deleted';
      await recordEvent(
        kube,
        ns,
        { apiVersion: apiVersionOf(ref), kind: ref.kind, name, namespace: ns, ...(uid ? { uid } : {}) },
        reason,
        `${r.function} run ${r.runId} ${r.outcome} (exit ${r.exitCode}): ${r.error ?? `${r.failed.length} failed`}; ${nothing}`,
        'Warning',
        time.now(),
      ).catch(() => undefined);
    },
  };
}

export async function saveSnapshot(dir: string, s: Snapshot): Promise<string> {
  ensureDir(dir);
  const path = join(
    dir,
    `${s.function}-${new Date(s.takenAt).toISOString().replace(/[:.]/g, '-')}-${s.id.slice(0, 8)}.json`,
  );
  await writeFile(path, `${JSON.stringify(s, null, 1)}\n`);
  return path;
}
