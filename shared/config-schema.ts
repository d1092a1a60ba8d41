/**
 * The schema of the config file (zod): every key, what it takes, and the message when it
 * takes something else. `config.ts` loads, layers and resolves it.
 */
import { validate as validCron } from 'node-cron';
import { z } from 'zod';
import { describeValue } from './contract/settings.ts';
import { parseDuration } from './engine/duration.ts';

/** A duration given as text or as a number (`0`, `"0"`, `0s` are one value): YAML turns `0` into a number. */
const durationMs = (v: unknown): number | undefined =>
  typeof v === 'string' ? parseDuration(v) : typeof v === 'number' ? parseDuration(String(v)) : undefined;

const duration = z.unknown().transform((v, ctx) => {
  const ms = durationMs(v);
  if (ms === undefined) {
    ctx.addIssue({ code: 'custom', message: `expected a duration like \`15m\`, got ${describeValue(v)}` });
    return z.NEVER;
  }
  return ms;
});

const durationOrNever = z.unknown().transform((v, ctx) => {
  if (v === 'never') return null;
  const ms = durationMs(v);
  if (ms === undefined) {
    ctx.addIssue({
      code: 'custom',
      message: `expected a duration like \`1h\`, or \`never\`, got ${describeValue(v)}`,
    });
    return z.NEVER;
  }
  return ms;
});

const percent = z
  .number({ error: (i) => `expected a percentage (0-100), got ${describeValue(i.input)}` })
  .min(0)
  .max(100);
const count = z
  .number({ error: (i) => `expected a whole number, got ${describeValue(i.input)}` })
  .int()
  .min(0);

export const functionSchema = z
  .object({
    enabled: z.boolean().optional(),
    apply: z.boolean().optional(),
    /** In a dry run, save the observations anyway (so that they build up before `apply`). */
    record: z.boolean().optional(),
    schedule: z
      .unknown()
      .transform((v, ctx) => {
        if (typeof v !== 'string' || !validCron(v)) {
          ctx.addIssue({
            code: 'custom',
            message: `expected a cron expression (5 or 6 fields) like \`*/5 * * * *\`, got ${describeValue(v)}`,
          });
          return z.NEVER;
        }
        return v;
      })
      .optional(),
    grace: duration.optional(),
    minAge: duration.optional(),
    kindGrace: z.record(z.string(), duration).optional(),
    maxDeletions: count.optional(),
    maxDeletionPercent: percent.optional(),
    minDeletionsForPercent: count.optional(),
    maxEvidenceDropPercent: percent.optional(),
    acceptEvidenceDropAfter: durationOrNever.optional(),
    /** A run that would delete more than `requiredAbove` writes a report and waits for a human. */
    approval: z
      .object({
        requiredAbove: count.optional(),
        /** `apply --from-report` refuses a report older than this (default 24h). */
        maxReportAge: duration.optional(),
        /** Where a run that needs approval writes its report (default: none; the log says so). */
        reportDir: z.string().optional(),
      })
      .strict()
      .optional(),
    settings: z.record(z.string(), z.unknown()).optional(),
  })
  .strict();

export const stateSpec = z.string().regex(/^(file:.+|configmap:[a-z0-9]([-a-z0-9]*[a-z0-9])?)$/, {
  error: (i) => `expected \`file:DIR\` or \`configmap:NAMESPACE\`, got ${describeValue(i.input)}`,
});

export const fileSchema = z
  .object({
    apply: z.boolean().optional(),
    /** In a dry run, save the observations anyway (every function). */
    record: z.boolean().optional(),
    /**
     * Allow a grace, kindGrace or minAge below one minute (the floor), zero included: for
     * tests and sandboxes, where two observations a moment apart are the point.
     */
    allowShortGrace: z.boolean().optional(),
    state: stateSpec.optional(),
    kubeconfig: z.string().optional(),
    context: z.string().optional(),
    output: z.enum(['json', 'table']).optional(),
    deadline: duration.optional(),
    callTimeout: duration.optional(),
    concurrency: z.number().int().min(1).max(64).optional(),
    /**
     * The act phase re-checks deletions against evidence read once for all its batches, and
     * reads it again once it is older than this (default 30s; at most 10m).
     */
    evidenceMaxAge: duration
      .refine((ms) => ms <= 10 * 60_000, {
        message: 'expected at most `10m`: evidence older than that is not fresh',
      })
      .optional(),
    pageSize: z.number().int().min(1).max(10000).optional(),
    leaseDuration: duration.optional(),
    metricsPort: z.number().int().min(0).max(65535).optional(),
    metricsHost: z.string().optional(),
    /** Namespace of the CronJobs: refused and aborted runs leave a Warning Event on `twopass-<function>` there. */
    eventNamespace: z.string().optional(),
    /** One summary message per run to a webhook (Slack-compatible or plain JSON). */
    notify: z
      .object({
        webhook: z
          .object({
            /** The URL itself (when it holds no secret) ... */
            url: z.string().url().optional(),
            /** ... or the environment variable that holds it (from a Secret; default TWOPASS_WEBHOOK_URL). */
            urlEnv: z.string().optional(),
            format: z.enum(['json', 'slack']).optional(),
            timeout: duration.optional(),
            /** The outcomes to send (default: refused, aborted, failed, approval, held, deleted). */
            on: z
              .array(
                z.enum([
                  'refused',
                  'aborted',
                  'failed',
                  'locked',
                  'approval',
                  'held',
                  'deleted',
                  'confirmed-dry-run',
                ]),
              )
              .optional(),
            /** How many keys a message lists (default 10); the rest are counted. */
            maxKeys: count.optional(),
          })
          .strict(),
      })
      .strict()
      .optional(),
    functions: z.record(z.string(), functionSchema).optional(),
    /** User-defined functions: a rule inline, or `{ file: PATH }` (relative to this file). */
    rules: z
      .array(z.record(z.string(), z.unknown()), {
        error: (i) =>
          `expected a list of rules (each inline, or \`{ file: PATH }\`), got ${describeValue(i.input)}`,
      })
      .optional(),
  })
  .strict();

export type FileConfig = z.infer<typeof fileSchema>;
