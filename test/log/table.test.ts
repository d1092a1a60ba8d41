/** The terminal table and its progress line: a header, whole names, keys, progress only on a terminal's stderr. */
import { Writable } from 'node:stream';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { terminalProgress } from '../../shared/cli/progress.ts';
import { createLogger } from '../../shared/log/logger.ts';
import { HEADER } from '../../shared/log/table.ts';

function sink() {
  let text = '';
  const stream = new Writable({
    write(chunk: Buffer, _e, cb) {
      text += chunk.toString();
      cb();
    },
  });
  return { stream, text: () => text };
}
const flush = () => new Promise((r) => setImmediate(r));

test('a credential is redacted in every output, JSON and the table: by field and inside an error message', async () => {
  for (const output of ['json', 'table'] as const) {
    const out = sink();
    const log = createLogger({ output, stream: out.stream, clock: () => Date.parse('2026-12-03T10:00:00Z') });
    log.error(
      {
        event: 'run.aborted',
        call: 'keystone issue token',
        reason:
          'POST https://admin:hunter2@keystone.example/v3/auth/tokens failed: {"password": "s3cr3t-pw"} with Authorization: Bearer eyJhbGciOi.abc.def, X-Auth-Token: gAAAAtoken',
        auth: { password: 'field-pw', token: 'field-token' },
      },
      'run.aborted',
    );
    log.warn({ event: 'x' }, 'token=msg-token in the message');
    await flush();
    const text = out.text();
    assert.ok(text.length > 0, output);
    for (const secret of [
      'hunter2',
      's3cr3t-pw',
      'eyJhbGciOi',
      'gAAAAtoken',
      'field-pw',
      'field-token',
      'msg-token',
    ])
      assert.not.ok(text.includes(secret), `${output}: ${secret} leaked: ${text}`);
    assert.match(text, /\[redacted\]/, output);
    if (output === 'table') assert.match(text, /run\.aborted/);
  }
});

test('the table has a header, prints long names whole, and shows each target row with its key', async () => {
  const out = sink();
  const log = createLogger({
    output: 'table',
    stream: out.stream,
    clock: () => Date.parse('2026-12-03T10:00:00Z'),
  });
  const long = 'a-namespace-with-a-long-name/ss-cinfo-0-with-an-even-longer-pod-name eth0';
  log.info({ event: 'candidate.new', kind: 'DanmEp', name: 'default/ss-cinfo-0 eth0', key: 'uid-old' }, 'x');
  log.info({ event: 'candidate.new', kind: 'DanmEp', name: 'default/ss-cinfo-0 eth0', key: 'uid-new' }, 'x');
  log.info({ event: 'candidate.new', kind: 'DanmEp', name: long, key: 'uid-long' }, 'x');
  await flush();
  const lines = out.text().trimEnd().split('\n');
  assert.is(lines[0], HEADER, 'one header, first');
  assert.match(HEADER, /^TIME\s+EVENT\s+KIND\s+NAME\s+DETAIL \[KEY\]$/);
  assert.is(lines.filter((l) => l === HEADER).length, 1);
  assert.match(lines[1]!, /default\/ss-cinfo-0 eth0 .*\[uid-old\]$/);
  assert.match(
    lines[2]!,
    /default\/ss-cinfo-0 eth0 .*\[uid-new\]$/,
    'two rows of one name tell their objects apart',
  );
  assert.ok(lines[3]!.includes(long), 'a long name is not cut');
});

test('a part of a unit names its unit; the act phase says how it went', async () => {
  const out = sink();
  const log = createLogger({ output: 'table', stream: out.stream, clock: () => 0 });
  log.info(
    {
      event: 'resource.deleted',
      kind: 'FloatingIP',
      name: '198.18.0.7 (f1)',
      key: 'f1',
      partOf: 'p1',
      detail: 'floating IP deleted',
    },
    'x',
  );
  log.warn(
    {
      event: 'delete.skipped',
      kind: 'FloatingIP',
      name: '198.18.0.8 (f2)',
      key: 'f2',
      partOf: 'p2',
      reason: 'floating IP left: on port p9 now',
    },
    'x',
  );
  log.info(
    { event: 'act.summary', function: 'danm-endpoints', actions: 500, units: 5, evidenceReads: 1 },
    'x',
  );
  await flush();
  const lines = out.text().trimEnd().split('\n');
  assert.match(lines[1]!, /FloatingIP .*floating IP deleted \(part of p1\) \[f1\]$/);
  assert.match(lines[2]!, /on port p9 now \(part of p2\) \[f2\]$/);
  assert.match(lines[3]!, /act\.summary .*confirmed=500 units=5 shared-evidence-reads=1$/);
});

test('every event that says why in JSON says it in the table; kind columns line up', async () => {
  const out = sink();
  const log = createLogger({ output: 'table', stream: out.stream, clock: () => 0 });
  const rows: [Record<string, unknown>, RegExp][] = [
    [
      {
        event: 'approval.skipped',
        kind: 'DanmEp',
        name: 'a/b eth0',
        key: 'k',
        reason: 'in use again since the report',
      },
      /in use again since the report/,
    ],
    [
      { event: 'approval.required', function: 'f', reason: '3 deletions exceed approval.requiredAbove (2)' },
      /exceed/,
    ],
    [
      { event: 'report.written', function: 'f', path: '/tmp/r.json', entries: 3, why: 'dry run' },
      /3 entries -> \/tmp\/r\.json \(dry run\)/,
    ],
    [{ event: 'snapshot.saved', function: 'f', path: '/tmp/s.json' }, /-> \/tmp\/s\.json/],
    [
      { event: 'notify.failed', function: 'f', reason: 'HTTP 500 from the webhook' },
      /HTTP 500 from the webhook/,
    ],
    [{ event: 'metrics.push-failed', function: 'f', error: 'connect ECONNREFUSED' }, /ECONNREFUSED/],
    [
      { event: 'state.not-recorded', function: 'f', reason: 'a dry run without --record' },
      /without --record/,
    ],
  ];
  for (const [e] of rows) log.warn(e, String(e.event));
  log.info(
    { event: 'candidate.new', kind: 'IPPoolAllocationNotListed', name: 'pool/10.0.0.1', key: 'k1' },
    'x',
  );
  log.info({ event: 'candidate.new', kind: 'DanmEp', name: 'pool/10.0.0.2', key: 'k2' }, 'x');
  await flush();
  const lines = out.text().trimEnd().split('\n').slice(1);
  for (const [i, [, says]] of rows.entries()) assert.match(lines[i]!, says, lines[i]);
  const [a, b] = lines.slice(-2);
  assert.is(a!.indexOf('pool/10.0.0.1'), b!.indexOf('pool/10.0.0.2'), 'the name column starts at one place');
});

test('progress: drawn on a terminal at most five times a second, cleared before a table row', () => {
  const err = sink();
  const out = sink();
  let now = 0;
  const p = terminalProgress(err.stream, () => now);
  p.onPage({ what: 'list pods', pages: 1, items: 500 });
  now = 100;
  p.onPage({ what: 'list pods', pages: 2, items: 1000 }); // too soon: not drawn
  now = 1000;
  p.onPage({ what: 'list pods', pages: 3, items: 1500 });
  const drawn = err.text().split('\r\x1b[K').filter(Boolean);
  assert.equal(drawn, [
    'list pods: 1 page(s), 500 items, 500000/s',
    'list pods: 3 page(s), 1500 items, 1500/s',
  ]);
  p.around(out.stream).write('a row\n');
  assert.ok(err.text().endsWith('\r\x1b[K'), 'the progress line is cleared before the row');
  assert.is(out.text(), 'a row\n');
});

test.run();
