/**
 * The webhook sink against a loopback receiver: one message per run for the outcomes asked
 * for, plain JSON or Slack-compatible; a receiver that times out or answers 500 is logged
 * and counted, and the run's exit code and deletions are what they would have been. The
 * URL (a secret) is never logged.
 */
import { mkdtempSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { danmEndpoints } from '../../functions/danm-endpoints/index.ts';
import { type FileConfig, resolveConfig } from '../../shared/config.ts';
import { MINUTE } from '../../shared/contract/index.ts';
import { ConfigError } from '../../shared/errors.ts';
import { RunMetrics } from '../../shared/metrics/metrics.ts';
import { EXIT } from '../../shared/runtime/errors.ts';
import { runFunction } from '../../shared/runtime/wire.ts';
import { leakedEndpoint, R } from '../../shared/sandbox/scenarios/danm.ts';
import { fakeTarget, type KubeTarget } from '../helpers/kube-target.ts';
import { captureLog } from '../helpers/memfn.ts';
import { testTime } from '../helpers/time.ts';

type Receiver = { url: string; got: Record<string, unknown>[]; close: () => Promise<void> };

async function receiver(answer: (req: IncomingMessage, res: ServerResponse) => void): Promise<Receiver> {
  const got: Record<string, unknown>[] = [];
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      got.push(JSON.parse(body) as Record<string, unknown>);
      answer(req, res);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as AddressInfo).port;
  return {
    // a Slack-like URL: its path is the secret
    url: `http://127.0.0.1:${port}/services/T0/B0/SECRETTOKEN`,
    got,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

const OK = (_q: IncomingMessage, res: ServerResponse) => res.writeHead(200).end('ok');

/** A receiver for the length of `body`, closed after it whatever happens. */
async function withReceiver(
  answer: (req: IncomingMessage, res: ServerResponse) => void,
  body: (rx: Receiver) => Promise<void>,
): Promise<void> {
  const rx = await receiver(answer);
  try {
    await body(rx);
  } finally {
    await rx.close();
  }
}

const test = suite<{ t: KubeTarget }>('notifications: the webhook sink');
test.before(async (ctx) => {
  ctx.t = await fakeTarget();
});
test.after(async (ctx) => ctx.t.close());

/** Two runs of danm-endpoints on one leaked DanmEp: the first observes, the second decides. */
async function twoRuns(
  t: KubeTarget,
  rx: Receiver,
  notify: NonNullable<NonNullable<FileConfig['notify']>['webhook']>,
  fn: Record<string, unknown> = {},
  apply = true,
) {
  const kube = t.client();
  const ns = await t.namespace();
  const ep = await leakedEndpoint(kube, ns, '10.10.10.5');
  const cfg = resolveConfig(
    {
      allowShortGrace: true,
      notify: { webhook: notify },
      functions: {
        'danm-endpoints': {
          grace: 0,
          minAge: 0,
          maxDeletionPercent: 100,
          settings: { namespaces: [ns] },
          ...fn,
        },
      },
    },
    'test',
    { state: `file:${mkdtempSync(join(tmpdir(), 'twopass-notify-'))}` },
  );
  let now = Date.now() + MINUTE;
  const cap = captureLog(() => now);
  const metrics = new RunMetrics(() => now, '0.0.0');
  const results = [];
  for (let i = 0; i < 2; i++) {
    results.push(
      await runFunction(
        danmEndpoints,
        cfg,
        {
          time: testTime(() => now),
          log: cap.log,
          kubeOptions: t.options,
          hooks: metrics.hooks(),
          processEnv: { TWOPASS_WEBHOOK_URL: rx.url },
        },
        { apply, record: true },
      ),
    );
    now += MINUTE;
  }
  const gone = (await kube.get(R.danmeps, ns, ep.metadata.name)) === undefined;
  await kube.close();
  return { results, lines: cap.lines, metrics: await metrics.text(), ep, gone };
}

const noSecret = (lines: Record<string, unknown>[]) =>
  assert.not.ok(JSON.stringify(lines).includes('SECRETTOKEN'), 'the webhook URL is never logged');

test('a deletion: one JSON message with the counts and the keys; a quiet run sends nothing', async ({
  t,
}) => {
  await withReceiver(OK, async (rx) => {
    const r = await twoRuns(t, rx, {});
    assert.equal(
      r.results.map((x) => x.exitCode),
      [EXIT.ok, EXIT.ok],
    );
    assert.ok(r.gone);
    assert.is(rx.got.length, 1, 'the observing run sent nothing');
    const m = rx.got[0]!;
    assert.is(m.function, 'danm-endpoints');
    assert.is(m.why, 'deleted');
    assert.is(m.exitCode, 0);
    assert.equal(m.counts, { confirmed: 1, deleted: 1, skipped: 0, failed: 0 });
    assert.equal(m.keys, [r.ep.metadata.uid]);
    assert.match(String(m.rest), /runId/);
    assert.ok(r.lines.some((l) => l.event === 'notify.sent' && l.webhook === '$TWOPASS_WEBHOOK_URL'));
    noSecret(r.lines);
  });
});

test('a refused run, Slack-compatible: one `{ text }` message that says refused and exit 4', async ({
  t,
}) => {
  await withReceiver(OK, async (rx) => {
    const r = await twoRuns(t, rx, { format: 'slack' }, { maxDeletions: 0 });
    assert.is(r.results[1]!.outcome, 'refused');
    assert.is(rx.got.length, 1);
    const text = String(rx.got[0]!.text);
    assert.equal(Object.keys(rx.got[0]!), ['text']);
    assert.match(text, /^twopass danm-endpoints: refused \(exit 4\): confirmed \d+, deleted 0/);
    assert.match(text, /refused by the blast-radius guard/);
  });
});

test('confirmed in a dry run is sent only when asked for; outcomes not asked for send nothing', async ({
  t,
}) => {
  await withReceiver(OK, async (rx) => {
    const r = await twoRuns(t, rx, { on: ['confirmed-dry-run'], maxKeys: 0 }, {}, false);
    assert.not.ok(r.gone);
    assert.is(rx.got.length, 1);
    assert.is(rx.got[0]!.why, 'confirmed-dry-run');
    assert.is(rx.got[0]!.dryRun, true);
    assert.equal(rx.got[0]!.keys, []);
    assert.is(rx.got[0]!.moreKeys, 1, 'keys beyond maxKeys are counted');
    await withReceiver(OK, async (quiet) => {
      await twoRuns(t, quiet, { on: ['refused'] });
      assert.is(quiet.got.length, 0, 'a deletion is not sent when only refusals are asked for');
    });
  });
});

for (const [what, answer, reason] of [
  ['a receiver that never answers', () => undefined, /no answer within 300 ms/],
  [
    'a receiver that answers 500',
    (_q: IncomingMessage, res: ServerResponse) => res.writeHead(500).end('boom'),
    /HTTP 500/,
  ],
] as const)
  test(`${what}: logged and counted; the run deletes and exits as it would`, async ({ t }) => {
    const rx = await receiver(answer as (q: IncomingMessage, r: ServerResponse) => void);
    try {
      const r = await twoRuns(t, rx, { timeout: 300 });
      assert.equal(
        r.results.map((x) => x.exitCode),
        [EXIT.ok, EXIT.ok],
      );
      assert.ok(r.gone, 'the deletion happened');
      const failed = r.lines.find((l) => l.event === 'notify.failed');
      assert.ok(failed);
      assert.match(String(failed.reason), reason);
      assert.match(r.metrics, /twopass_notify_failures_total\{function="danm-endpoints"\} 1/);
      assert.match(r.metrics, /twopass_last_run_notify_failed\{function="danm-endpoints"\} 1/);
      noSecret(r.lines);
    } finally {
      await rx.close();
    }
  });

test('a webhook whose URL variable is not set is a configuration error before any I/O', async ({ t }) => {
  const cfg = resolveConfig({ notify: { webhook: { urlEnv: 'SLACK_URL' } } }, 'test', {
    state: `file:${mkdtempSync(join(tmpdir(), 'twopass-notify-'))}`,
  });
  const mark = t.fake!.requests.length;
  try {
    await runFunction(
      danmEndpoints,
      cfg,
      { time: testTime(), log: captureLog(Date.now).log, kubeOptions: t.options, processEnv: {} },
      { apply: true },
    );
    assert.unreachable();
  } catch (err) {
    assert.instance(err, ConfigError);
    assert.match((err as Error).message, /notify\.webhook: \$SLACK_URL is not set/);
  }
  assert.is(t.fake!.requests.length, mark, 'nothing was asked of the cluster');
});

test.run();
