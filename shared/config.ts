/**
 * Configuration: one YAML file validated with zod, then environment, then CLI
 * flags (flags win). Parsed once into a frozen object; errors say which key,
 * what was expected and what was found.
 */
import { readFileSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import { parse as parseYaml } from 'yaml';
import type { z } from 'zod';
import { type FileConfig, fileSchema, type functionSchema, stateSpec } from './config-schema.ts';
import { EVIDENCE_MAX_AGE_MS } from './contract/fresh.ts';
import type { FunctionDefaults } from './contract/index.ts';
import { formatDuration, GRACE_FLOOR_MS, parseDuration } from './engine/duration.ts';
import type { Policy } from './engine/types.ts';
import { ConfigError, issuesText, yamlMessage } from './errors.ts';

export { type FileConfig, fileSchema } from './config-schema.ts';

export type Overrides = Readonly<{
  apply?: boolean;
  state?: string;
  kubeconfig?: string;
  context?: string;
  output?: 'json' | 'table';
  grace?: string;
  /** Allow a grace below the floor (TWOPASS_ALLOW_SHORT_GRACE). */
  allowShortGrace?: boolean;
  deadline?: string;
  pageSize?: number;
  eventNamespace?: string;
  /** Rule files added to the config's rules (TWOPASS_RULES). */
  rules?: readonly string[];
}>;

export type Approval = Readonly<{ requiredAbove?: number; maxReportAgeMs: number; reportDir?: string }>;

export type FunctionConfig = Readonly<{
  enabled: boolean;
  apply: boolean;
  record: boolean;
  schedule: string;
  policy: Policy;
  approval: Approval;
  settings: Readonly<Record<string, unknown>>;
}>;

export type Config = Readonly<{
  apply: boolean;
  record: boolean;
  state: { kind: 'file'; dir: string } | { kind: 'configmap'; namespace: string };
  kubeconfig?: string;
  context?: string;
  output?: 'json' | 'table';
  deadlineMs: number;
  callTimeoutMs: number;
  concurrency: number;
  evidenceMaxAgeMs: number;
  pageSize: number;
  leaseDurationSeconds: number;
  metricsPort: number;
  metricsHost: string;
  eventNamespace?: string;
  notify?: FileConfig['notify'];
  /** The rules of the config as written (compiled by the function registry). */
  rules: readonly Readonly<Record<string, unknown>>[];
  functions: Readonly<
    Record<
      string,
      FileConfig['functions'] extends infer F ? (F extends Record<string, infer V> ? V : never) : never
    >
  >;
  source: string;
}>;

const issuesToMessage = (where: string, error: z.ZodError) => issuesText(error, { where });

export function loadConfigFile(path: string | undefined): { raw: FileConfig; source: string } {
  if (path === undefined) return { raw: {}, source: 'defaults' };
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`config ${path}: cannot read: ${(err as Error).message}`, { cause: err });
  }
  return { raw: parseConfigText(text, path), source: path };
}

export function parseConfigText(text: string, where: string): FileConfig {
  let doc: unknown;
  try {
    doc = parseYaml(text, { logLevel: 'error' });
  } catch (err) {
    throw new ConfigError(`config ${where}: not valid YAML: ${yamlMessage(err)}`, { cause: err });
  }
  if (doc === null || doc === undefined) doc = {};
  const r = fileSchema.safeParse(doc);
  if (!r.success) throw new ConfigError(issuesToMessage(`config ${where}`, r.error));
  return r.data;
}

/** Environment variables that map onto config keys (env over file, flags over env). */
export function envOverrides(env: Readonly<Record<string, string | undefined>>): Overrides {
  const out: Record<string, unknown> = {};
  if (env.TWOPASS_APPLY !== undefined) {
    if (!/^(true|false|1|0)$/.test(env.TWOPASS_APPLY))
      throw new ConfigError(`TWOPASS_APPLY: expected true or false, got \`${env.TWOPASS_APPLY}\``);
    out.apply = env.TWOPASS_APPLY === 'true' || env.TWOPASS_APPLY === '1';
  }
  if (env.TWOPASS_STATE) out.state = env.TWOPASS_STATE;
  if (env.TWOPASS_OUTPUT) {
    if (env.TWOPASS_OUTPUT !== 'json' && env.TWOPASS_OUTPUT !== 'table')
      throw new ConfigError(`TWOPASS_OUTPUT: expected json or table, got \`${env.TWOPASS_OUTPUT}\``);
    out.output = env.TWOPASS_OUTPUT;
  }
  if (env.TWOPASS_GRACE) out.grace = env.TWOPASS_GRACE;
  if (env.TWOPASS_ALLOW_SHORT_GRACE !== undefined && env.TWOPASS_ALLOW_SHORT_GRACE !== '') {
    if (!/^(true|false|1|0)$/.test(env.TWOPASS_ALLOW_SHORT_GRACE))
      throw new ConfigError(
        `TWOPASS_ALLOW_SHORT_GRACE: expected true or false, got \`${env.TWOPASS_ALLOW_SHORT_GRACE}\``,
      );
    out.allowShortGrace = env.TWOPASS_ALLOW_SHORT_GRACE === 'true' || env.TWOPASS_ALLOW_SHORT_GRACE === '1';
  }
  if (env.TWOPASS_EVENT_NAMESPACE) out.eventNamespace = env.TWOPASS_EVENT_NAMESPACE;
  if (env.KUBECONFIG && !env.KUBECONFIG.includes(':')) out.kubeconfig = env.KUBECONFIG;
  // Rule files, `:`-separated, relative to the working directory (a rule's CronJob mounts its own).
  if (env.TWOPASS_RULES)
    out.rules = env.TWOPASS_RULES.split(':')
      .filter(Boolean)
      .map((f) => resolvePath(f));
  return out as Overrides;
}

export function resolveConfig(raw: FileConfig, source: string, ...layers: Overrides[]): Config {
  const o: Record<string, unknown> = {};
  for (const l of layers) for (const [k, v] of Object.entries(l)) if (v !== undefined) o[k] = v;
  const stateText = (o.state as string | undefined) ?? raw.state ?? 'file:.twopass';
  const st = stateSpec.safeParse(stateText);
  if (!st.success) throw new ConfigError(issuesToMessage('--state', st.error));
  const state = stateText.startsWith('file:')
    ? { kind: 'file' as const, dir: stateText.slice(5) }
    : { kind: 'configmap' as const, namespace: stateText.slice(10) };
  const grace = o.grace as string | undefined;
  if (grace !== undefined && parseDuration(grace) === undefined) {
    throw new ConfigError(`--grace: expected a duration like \`15m\`, got \`${grace}\``);
  }
  const deadline = o.deadline as string | undefined;
  const deadlineMs = deadline !== undefined ? parseDuration(deadline) : raw.deadline;
  if (deadline !== undefined && deadlineMs === undefined)
    throw new ConfigError(`--deadline: expected a duration like \`10m\`, got \`${deadline}\``);
  if (deadlineMs !== undefined && deadlineMs < 1000)
    throw new ConfigError(
      `${deadline !== undefined ? '--deadline' : `config ${source}: \`deadline\``}: expected at least \`1s\` (a run needs time to list), got \`${formatDuration(deadlineMs)}\``,
    );
  if (raw.callTimeout !== undefined && raw.callTimeout < 100)
    throw new ConfigError(
      `config ${source}: \`callTimeout\`: expected at least \`100ms\` (every call would time out), got \`${formatDuration(raw.callTimeout)}\``,
    );
  const functions: Record<string, z.infer<typeof functionSchema>> = {};
  for (const [name, f] of Object.entries(raw.functions ?? {})) functions[name] = { ...f };
  const allowShort = (o.allowShortGrace as boolean | undefined) ?? raw.allowShortGrace ?? false;
  if (!allowShort)
    checkGraceFloor(functions, grace !== undefined ? parseDuration(grace)! : undefined, source);
  const cfg: Config = {
    apply: (o.apply as boolean | undefined) ?? raw.apply ?? false,
    record: raw.record ?? false,
    state,
    ...((o.kubeconfig ?? raw.kubeconfig) !== undefined
      ? { kubeconfig: (o.kubeconfig as string | undefined) ?? raw.kubeconfig! }
      : {}),
    ...((o.context ?? raw.context) !== undefined
      ? { context: (o.context as string | undefined) ?? raw.context! }
      : {}),
    ...((o.output ?? raw.output) !== undefined
      ? { output: ((o.output as 'json' | 'table' | undefined) ?? raw.output)! }
      : {}),
    deadlineMs: deadlineMs ?? 10 * 60_000,
    callTimeoutMs: raw.callTimeout ?? 30_000,
    concurrency: raw.concurrency ?? 4,
    evidenceMaxAgeMs: raw.evidenceMaxAge ?? EVIDENCE_MAX_AGE_MS,
    pageSize: (o.pageSize as number | undefined) ?? raw.pageSize ?? 500,
    leaseDurationSeconds: Math.round((raw.leaseDuration ?? 60_000) / 1000),
    metricsPort: raw.metricsPort ?? 9464,
    metricsHost: raw.metricsHost ?? '127.0.0.1',
    ...((o.eventNamespace ?? raw.eventNamespace) !== undefined
      ? { eventNamespace: ((o.eventNamespace as string | undefined) ?? raw.eventNamespace)! }
      : {}),
    ...(raw.notify !== undefined ? { notify: raw.notify } : {}),
    functions: grace !== undefined ? withGrace(functions, parseDuration(grace)!) : functions,
    rules: [...(raw.rules ?? []), ...((o.rules as string[] | undefined) ?? []).map((file) => ({ file }))],
    source,
  };
  return Object.freeze(cfg);
}

/** Refuses a grace, kindGrace or minAge below the floor (without `allowShortGrace`), naming the key. */
function checkGraceFloor(
  fns: Record<string, z.infer<typeof functionSchema>>,
  flag: number | undefined,
  source: string,
): void {
  const refuse = (where: string, ms: number) => {
    throw new ConfigError(
      `${where}: \`${formatDuration(ms)}\` is below the floor of \`${formatDuration(GRACE_FLOOR_MS)}\` (two observations that close together prove nothing); \`allowShortGrace: true\` in the config (or TWOPASS_ALLOW_SHORT_GRACE=true) allows it, for tests and sandboxes`,
    );
  };
  if (flag !== undefined && flag < GRACE_FLOOR_MS) refuse('--grace', flag);
  for (const [name, f] of Object.entries(fns)) {
    const at = (key: string) => `config ${source}: \`functions.${name}.${key}\``;
    if (f.grace !== undefined && f.grace < GRACE_FLOOR_MS) refuse(at('grace'), f.grace);
    if (f.minAge !== undefined && f.minAge < GRACE_FLOOR_MS) refuse(at('minAge'), f.minAge);
    for (const [kind, ms] of Object.entries(f.kindGrace ?? {}))
      if (ms < GRACE_FLOOR_MS) refuse(at(`kindGrace.${kind}`), ms);
    // accepting a lower evidence count on its own: at once would take a broken lister as the
    // new baseline at the second refused run, a guard switched off without a word
    const accept = f.acceptEvidenceDropAfter;
    if (typeof accept === 'number' && accept < ACCEPT_FLOOR_MS)
      throw new ConfigError(
        `${at('acceptEvidenceDropAfter')}: \`${formatDuration(accept)}\` is below the floor of \`${formatDuration(ACCEPT_FLOOR_MS)}\` (a lower evidence count must hold that long before it is taken as the new baseline); say \`never\` to accept only by command (\`twopass state accept-evidence\`), or \`allowShortGrace: true\` for tests and sandboxes`,
      );
  }
}

/** The shortest `acceptEvidenceDropAfter` (and `--apart`) accepted without `allowShortGrace`. */
export const ACCEPT_FLOOR_MS = 10 * 60_000;

function withGrace(
  fns: Record<string, z.infer<typeof functionSchema>>,
  ms: number,
): Record<string, z.infer<typeof functionSchema>> {
  const out: Record<string, z.infer<typeof functionSchema>> = { '*': { grace: ms } };
  for (const [k, v] of Object.entries(fns)) out[k] = { ...v, grace: ms };
  return out;
}

/** The effective settings of one function: its defaults, overlaid with the config. */
export function functionConfig(cfg: Config, name: string, defaults: FunctionDefaults): FunctionConfig {
  const f = cfg.functions[name] ?? {};
  const star = cfg.functions['*'] ?? {};
  const graceMs = f.grace ?? star.grace ?? defaults.graceMs;
  const policy: Policy = {
    graceMs,
    ...(f.minAge !== undefined
      ? { minAgeMs: f.minAge }
      : defaults.minAgeMs !== undefined
        ? { minAgeMs: defaults.minAgeMs }
        : {}),
    // A kind waits at least the function's grace: a raised grace (`--grace 3h`) never leaves
    // a kind that is meant to wait longer waiting less.
    kindGraceMs: Object.fromEntries(
      Object.entries({ ...(defaults.kindGraceMs ?? {}), ...(f.kindGrace ?? {}) }).map(([k, ms]) => [
        k,
        Math.max(ms, graceMs),
      ]),
    ),
    maxDeletions: f.maxDeletions ?? defaults.maxDeletions,
    maxDeletionPercent: f.maxDeletionPercent ?? defaults.maxDeletionPercent,
    minDeletionsForPercent: f.minDeletionsForPercent ?? defaults.minDeletionsForPercent ?? 0,
    maxEvidenceDropPercent: f.maxEvidenceDropPercent ?? defaults.maxEvidenceDropPercent,
  };
  const accept =
    f.acceptEvidenceDropAfter !== undefined ? f.acceptEvidenceDropAfter : defaults.acceptEvidenceDropAfterMs;
  if (accept !== undefined && accept !== null)
    (policy as { acceptEvidenceDropAfterMs?: number }).acceptEvidenceDropAfterMs = accept;
  return Object.freeze({
    enabled: f.enabled ?? defaults.enabled ?? true,
    apply: f.apply ?? cfg.apply,
    record: f.record ?? cfg.record,
    schedule: f.schedule ?? defaults.schedule,
    policy,
    approval: {
      ...(f.approval?.requiredAbove !== undefined ? { requiredAbove: f.approval.requiredAbove } : {}),
      maxReportAgeMs: f.approval?.maxReportAge ?? 24 * 60 * 60_000,
      ...(f.approval?.reportDir !== undefined ? { reportDir: f.approval.reportDir } : {}),
    },
    settings: f.settings ?? {},
  });
}

export function describePolicy(p: Policy): string {
  const kinds = Object.entries(p.kindGraceMs ?? {}).map(([k, v]) => `${k}=${formatDuration(v)}`);
  return `grace ${formatDuration(p.graceMs)}${kinds.length ? ` (${kinds.join(', ')})` : ''}, minAge ${p.minAgeMs !== undefined ? formatDuration(p.minAgeMs) : 'grace'}, maxDeletions ${p.maxDeletions}, maxDeletionPercent ${p.maxDeletionPercent}% (above ${p.minDeletionsForPercent ?? 0} deletions), maxEvidenceDropPercent ${p.maxEvidenceDropPercent}% (a lower count accepted after ${p.acceptEvidenceDropAfterMs !== undefined ? formatDuration(p.acceptEvidenceDropAfterMs) : 'never'})`;
}
