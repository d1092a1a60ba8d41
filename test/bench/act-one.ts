/**
 * One run of one function, in its own process (a clean peak RSS), for the deleting-run
 * benchmark: a dry run or a deleting run, on a simulated clock (`--now`), with its state in
 * `--state DIR`. Counts every Kubernetes response (and every Neutron call), the conflicts
 * (409 / 412) among them, and prints one JSON line.
 */
import { Writable } from 'node:stream';
import { FUNCTIONS } from '../../functions/index.ts';
import { resolveConfig } from '../../shared/config.ts';
import type { AnyFunction, ConnectContext } from '../../shared/contract/index.ts';
import { createLogger } from '../../shared/log/logger.ts';
import type { NeutronClient } from '../../shared/openstack/neutron.ts';
import { packageRoot } from '../../shared/paths.ts';
import { ruleFunction } from '../../shared/rules/function.ts';
import { loadRuleFile } from '../../shared/rules/rule.ts';
import { runFunction } from '../../shared/runtime/wire.ts';
import { testTime } from '../helpers/time.ts';
import { arg, peakRssMiB } from './common.ts';

const name = arg('fn');
const server = arg('server');
const headers = JSON.parse(arg('headers', '{}')) as Record<string, string>;
const insecure = arg('insecure', 'false') === 'true';
const env = JSON.parse(arg('env', '{}')) as Record<string, string>;
const settings = JSON.parse(arg('settings', '{}')) as Record<string, unknown>;
const apply = arg('apply', 'false') === 'true';
const record = arg('record', 'false') === 'true';
const now = Number(arg('now'));
const stateDir = arg('state');
const concurrency = Number(arg('concurrency', '4'));

let kubeRequests = 0;
let cloudRequests = 0;
let conflicts = 0;

const base: AnyFunction = name.startsWith('rule:')
  ? ruleFunction(loadRuleFile(`${packageRoot()}/functions/rules/${name.slice(5)}/rule.yaml`)[0]!)
  : FUNCTIONS.find((f) => f.name === name)!;
/** lbaas-ports with its Neutron calls counted (every call, its status read for 412s). */
const fn: AnyFunction = base.connect
  ? {
      ...base,
      async connect(ctx: ConnectContext) {
        const ports = await base.connect!(ctx);
        const real = ports.reader.neutron as NeutronClient;
        type Call = (...a: unknown[]) => Promise<{ status: number }>;
        const counted = Object.create(real) as NeutronClient;
        const call = (real as unknown as { call: Call }).call;
        (counted as unknown as { call: Call }).call = async (...a: unknown[]) => {
          cloudRequests++;
          const r = await call.apply(counted, a);
          if (r.status === 412 || r.status === 409) conflicts++;
          return r;
        };
        return {
          ...ports,
          reader: { ...ports.reader, neutron: counted },
          writer: { ...ports.writer, neutron: counted },
        };
      },
    }
  : base;

const cfg = resolveConfig(
  {
    pageSize: 500,
    concurrency,
    functions: {
      [fn.name]: {
        enabled: true,
        maxDeletions: 100_000,
        maxDeletionPercent: 100,
        maxEvidenceDropPercent: 100,
        settings,
      },
    },
  },
  'bench',
  { state: `file:${stateDir}` },
);
let acts: Record<string, unknown> | undefined;
const log = createLogger({
  output: 'json',
  level: 'info',
  stream: new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const line of chunk.toString().split('\n'))
        if (line.includes('"act.summary"')) acts = JSON.parse(line) as Record<string, unknown>;
      cb();
    },
  }),
});
const t = performance.now();
const r = await runFunction(
  fn,
  cfg,
  {
    time: testTime(() => now),
    log,
    kubeOptions: {
      server,
      headers,
      ...(insecure ? { tls: { rejectUnauthorized: false } } : {}),
      onResponse: (i) => {
        kubeRequests++;
        if (i.status === 409) conflicts++;
      },
    },
    processEnv: env,
  },
  { apply, record },
);
console.log(
  JSON.stringify({
    fn: fn.name,
    apply,
    exit: r.exitCode,
    ...(r.error ? { error: r.error } : {}),
    ms: performance.now() - t,
    peakRssMiB: peakRssMiB(),
    kubeRequests,
    cloudRequests,
    conflicts,
    confirmed: r.confirmed.length,
    deleted: r.deleted.length,
    skipped: r.skipped.length,
    failed: r.failed.length,
    deletedByKind: r.deletedByKind,
    units: acts?.units,
    evidenceReads: acts?.evidenceReads,
  }),
);
