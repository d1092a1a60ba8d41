/**
 * Every command, walked with bad inputs the way an operator meets them: bad flags, bad
 * config, bad kubeconfig, no kubeconfig, an unreachable server, corrupt state, bad snapshot
 * files, a closed stdout. Each ends with one message (never a stack trace), the documented
 * exit code, and nothing written to the cluster.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { KubeHttpClient } from '../../shared/kube/client.ts';
import { installCrdsFromDir } from '../../shared/sandbox/crds.ts';
import { FakeKubeServer } from '../../shared/sandbox/kube/server.ts';
import { leakedEndpoint, R } from '../../shared/sandbox/scenarios/danm.ts';
import { spawnCli, twopassAsync } from '../helpers/cli.ts';
import { testTime } from '../helpers/time.ts';

const dir = mkdtempSync(join(tmpdir(), 'twopass-walk-'));
const file = (name: string, text: string) => {
  writeFileSync(join(dir, name), text);
  return join(dir, name);
};
const UNREACHABLE = new URL('../fixtures/unreachable.kubeconfig', import.meta.url).pathname;
const empty = mkdtempSync(join(tmpdir(), 'twopass-home-'));
/** An environment with no kubeconfig anywhere. */
const NO_KUBECONFIG = { HOME: empty, KUBECONFIG: '', KUBERNETES_SERVICE_HOST: '' };

type Case = Readonly<{
  what: string;
  args: (kc: string) => string[];
  env?: Record<string, string>;
  exit: number;
  says: RegExp;
  /** The message is one line on stderr. */
  oneLine?: boolean;
}>;

/** A rule file whose `inUse` is INUSE. */
const RULE = `name: x
description: widgets
target: { group: example.com, version: v1, resource: widgets, kind: Widget, namespaced: true }
owner: { group: example.com }
evidence:
  pods: { group: "", version: v1, resource: pods, kind: Pod, namespaced: true, key: object.metadata.uid }
inUse: INUSE
`;

/** A command against a server that does not answer: exit 3, and a message that says so. */
const unreachable = (command: string, args: string[], says = /could not read what was asked/): Case => ({
  what: `${command} against an unreachable server`,
  args: () => [...args, '--kubeconfig', UNREACHABLE],
  exit: 3,
  says,
});

/** `twopass run danm-endpoints` against the fake, with this config file. */
const runWith = (kc: string, config: string) => [
  'run',
  'danm-endpoints',
  '--kubeconfig',
  kc,
  '--config',
  config,
];

const CASES: Case[] = [
  { what: 'no command', args: () => [], exit: 2, says: /Usage: twopass/ },
  { what: 'an unknown command', args: () => ['frobnicate'], exit: 2, says: /unknown command `frobnicate`/ },
  { what: 'an unknown flag', args: () => ['run', 'danm-endpoints', '--force'], exit: 2, says: /--force/ },
  {
    what: 'run without a function',
    args: (kc) => ['run', '--kubeconfig', kc],
    exit: 2,
    says: /name a function/,
  },
  {
    what: 'run of an unknown function',
    args: (kc) => ['run', 'danm', '--kubeconfig', kc],
    exit: 2,
    says: /unknown function `danm`; known: danm-endpoints/,
  },
  {
    what: 'a missing config file',
    args: (kc) => ['run', 'danm-endpoints', '--kubeconfig', kc, '--config', join(dir, 'nope.yaml')],
    exit: 2,
    says: /nope\.yaml/,
  },
  {
    what: 'a config that is not YAML',
    args: (kc) => ['run', 'danm-endpoints', '--kubeconfig', kc, '--config', file('bad.yaml', 'a: [\n')],
    exit: 2,
    says: /bad\.yaml/,
  },
  {
    what: 'an unknown settings key',
    args: (kc) =>
      runWith(kc, file('typo.yaml', 'functions:\n  danm-endpoints:\n    settings: { namespace: [a] }\n')),
    exit: 2,
    says: /namespace/,
  },
  {
    what: 'a bad duration',
    args: (kc) => ['run', 'danm-endpoints', '--kubeconfig', kc, '--grace', 'soon'],
    exit: 2,
    says: /--grace/,
  },
  {
    what: 'a bad --output',
    args: () => ['functions', '--output', 'yaml'],
    exit: 2,
    says: /--output: expected json or table/,
  },
  {
    what: 'a bad --state',
    args: (kc) => ['state', 'show', 'danm-endpoints', '--kubeconfig', kc, '--state', 'etcd:x'],
    exit: 2,
    says: /state/,
  },
  {
    what: 'a kubeconfig that is not one',
    args: () => ['run', 'danm-endpoints', '--kubeconfig', file('garbage.kubeconfig', 'not: [a kubeconfig\n')],
    exit: 2,
    says: /kubeconfig/,
  },
  {
    what: 'no kubeconfig anywhere',
    args: () => ['run', 'danm-endpoints'],
    env: NO_KUBECONFIG,
    exit: 2,
    says: /no kubeconfig found \(--kubeconfig: not given; \$KUBECONFIG: not set; .*\.kube\/config: not found; in-cluster: KUBERNETES_SERVICE_HOST not set\)/,
  },
  {
    what: 'run against an unreachable server',
    args: () => ['run', 'danm-endpoints', '--kubeconfig', UNREACHABLE, '--state', `file:${join(dir, 's1')}`],
    exit: 3,
    says: /run.aborted|ConnectionError|connect/,
  },
  unreachable('state show', ['state', 'show', 'danm-endpoints', '--state', 'configmap:twopass-system']),
  unreachable('explain', ['explain', 'danm-endpoints', 'x', '--state', `file:${join(dir, 's2')}`]),
  unreachable('state reset', ['state', 'reset', 'danm-endpoints', '--state', 'configmap:twopass-system']),
  unreachable('history', ['history', 'danm-endpoints', '--state', 'configmap:twopass-system']),
  {
    what: 'history with an option of another command',
    args: (kc) => ['history', 'danm-endpoints', '--apply', '--kubeconfig', kc],
    exit: 2,
    says: /--apply: not an option of `twopass history`/,
  },
  unreachable(
    'state accept-evidence',
    ['state', 'accept-evidence', 'danm-endpoints', '--state', `file:${join(dir, 's3')}`],
    /nothing accepted/,
  ),
  {
    what: 'state of an unknown function',
    args: (kc) => ['state', 'show', 'nope', '--kubeconfig', kc],
    exit: 2,
    says: /unknown function `nope`/,
  },
  {
    what: 'state with a bad subcommand',
    args: (kc) => ['state', 'frob', 'danm-endpoints', '--kubeconfig', kc],
    exit: 2,
    says: /usage: twopass state/,
  },
  {
    what: 'explain without a key',
    args: (kc) => ['explain', 'danm-endpoints', '--kubeconfig', kc],
    exit: 2,
    says: /usage: twopass explain/,
  },
  {
    what: 'state show on corrupt state: the hint names the store that was used',
    args: (kc) => [
      'state',
      'show',
      'danm-endpoints',
      '--kubeconfig',
      kc,
      '--state',
      `file:${corruptStateDir()}`,
    ],
    exit: 1,
    says: /not valid JSON.*`twopass state reset danm-endpoints --state file:\/.*corrupt-state`/,
  },
  { what: 'diff without files', args: () => ['diff'], exit: 2, says: /usage: twopass diff/ },
  {
    what: 'diff of a missing file',
    args: () => ['diff', join(dir, 'a.json'), join(dir, 'b.json')],
    exit: 2,
    says: /a\.json: not a saved snapshot/,
  },
  {
    what: 'diff of `{}`',
    args: () => ['diff', file('empty.json', '{}'), file('empty2.json', '{}')],
    exit: 2,
    says: /empty\.json: not a saved snapshot .*--save-snapshot/,
  },
  {
    what: 'diff of a file that is not JSON',
    args: () => ['diff', file('x.json', 'nope'), file('y.json', 'nope')],
    exit: 2,
    says: /x\.json: not a saved snapshot/,
  },
  {
    what: 'rules without a subcommand',
    args: () => ['rules'],
    exit: 2,
    says: /usage: twopass rules check FILE/,
  },
  {
    what: 'rules test without a world',
    args: () => ['rules', 'test', file('r.yaml', 'name: x')],
    exit: 2,
    says: /usage: twopass rules/,
  },
  {
    what: 'rules check of a file that is not YAML',
    args: () => ['rules', 'check', file('bad-rule.yaml', 'name: [x')],
    exit: 2,
    says: /rule file .*bad-rule\.yaml: not valid YAML/,
  },
  {
    what: 'rules check of an empty file',
    args: () => ['rules', 'check', file('empty-rule.yaml', '')],
    exit: 2,
    says: /no rule in it/,
  },
  {
    what: 'rules check of a rule without its fields',
    args: () => ['rules', 'check', file('thin-rule.yaml', 'name: thin')],
    exit: 2,
    says: /rule thin: `description`: .*\n.*rule thin: `target`/,
  },
  {
    what: 'rules test of a world whose objects lack a kind',
    args: () => [
      'rules',
      'test',
      new URL('../../functions/rules/danm-eps/rule.yaml', import.meta.url).pathname,
      file('world.yaml', 'metadata: { name: a }'),
    ],
    exit: 2,
    says: /every object needs apiVersion, kind and metadata\.name/,
  },
  {
    what: 'rules rbac with a flag of another command',
    args: () => ['rules', 'rbac', file('r2.yaml', 'name: x'), '--apply'],
    exit: 2,
    says: /--apply: not an option of `twopass rules`/,
  },
  {
    what: 'run with a config whose rule does not compile',
    args: (kc) => [
      'run',
      'x',
      '--kubeconfig',
      kc,
      '--config',
      file(
        'rule-config.yaml',
        'rules:\n  - name: x\n    description: x\n    target: { group: example.com, version: v1, resource: xs, kind: X, namespaced: true }\n    owner: { group: example.com }\n    inUse: object.metadata.name ==\n',
      ),
    ],
    exit: 2,
    says: /rule x: `inUse`: line 1, column \d+: /,
  },
  {
    what: 'schedule with a bad --listen',
    args: (kc) => ['schedule', '--kubeconfig', kc, '--listen', 'everywhere'],
    exit: 2,
    says: /--listen: expected HOST:PORT/,
  },
  // ---- the second pass: nothing acts sooner, wider or blind; one line each ----
  ...['0', '0s', '30s'].map(
    (g): Case => ({
      what: `--grace ${g} (below the floor)`,
      args: (kc) => ['run', 'danm-endpoints', '--kubeconfig', kc, '--grace', g],
      exit: 2,
      says: /--grace: `\d+(ms|s)` is below the floor of `1m`.*allowShortGrace/,
      oneLine: true,
    }),
  ),
  {
    what: 'TWOPASS_GRACE=0',
    args: (kc) => ['run', 'danm-endpoints', '--kubeconfig', kc],
    env: { TWOPASS_GRACE: '0' },
    exit: 2,
    says: /below the floor/,
    oneLine: true,
  },
  ...['grace: 0', 'grace: "0"', 'grace: 0s', 'minAge: 10s', 'kindGrace: { DanmBit: 0s }'].map(
    (line, i): Case => ({
      what: `a config with \`${line}\``,
      args: (kc) => runWith(kc, file(`zero-${i}.yaml`, `functions:\n  danm-endpoints:\n    ${line}\n`)),
      exit: 2,
      says: /`functions\.danm-endpoints\.(grace|minAge|kindGrace\.DanmBit)`: `\d+(ms|s)` is below the floor/,
      oneLine: true,
    }),
  ),
  {
    what: 'a config with `grace: 15` (a number without a unit)',
    args: (kc) => runWith(kc, file('grace-15.yaml', 'functions:\n  danm-endpoints:\n    grace: 15\n')),
    exit: 2,
    says: /expected a duration like `15m`, got `15`/,
  },
  {
    what: 'kindGrace of a kind the function does not have',
    args: (kc) =>
      runWith(
        kc,
        file('kind-typo.yaml', 'functions:\n  danm-endpoints:\n    kindGrace: { DanmBitt: 10m }\n'),
      ),
    exit: 2,
    says: /`functions\.danm-endpoints\.kindGrace\.DanmBitt`: unknown kind; the kinds of danm-endpoints: DanmEp, DanmBit/,
    oneLine: true,
  },
  {
    what: 'kindGrace of an unknown kind, in `functions`',
    args: () => [
      'functions',
      '--config',
      file('kind-typo2.yaml', 'functions:\n  whereabouts-ips:\n    kindGrace: { Nope: 10m }\n'),
    ],
    exit: 2,
    says: /kindGrace\.Nope`: unknown kind/,
  },
  {
    what: '--deadline 0',
    args: (kc) => ['run', 'danm-endpoints', '--kubeconfig', kc, '--deadline', '0'],
    exit: 2,
    says: /--deadline: expected at least `1s`/,
    oneLine: true,
  },
  {
    what: '`acceptEvidenceDropAfter: 0s` (a broken list taken as the baseline at once)',
    args: (kc) =>
      runWith(kc, file('accept0.yaml', 'functions:\n  danm-endpoints:\n    acceptEvidenceDropAfter: 0s\n')),
    exit: 2,
    says: /`functions\.danm-endpoints\.acceptEvidenceDropAfter`: `0ms` is below the floor of `10m`/,
    oneLine: true,
  },
  {
    what: '`callTimeout: 0s`',
    args: (kc) => runWith(kc, file('ct.yaml', 'callTimeout: 0s\n')),
    exit: 2,
    says: /`callTimeout`: expected at least `100ms`/,
    oneLine: true,
  },
  {
    what: '--state file: under a path that is a file',
    args: (kc) => [
      'run',
      'danm-endpoints',
      '--kubeconfig',
      kc,
      '--state',
      `file:${file('plain', 'x')}/state`,
    ],
    exit: 2,
    says: /--state file:.*cannot use it as the state directory: a part of the path is a file/,
  },
  {
    what: '--state file: where no directory can be made (/proc): at once, not a spin',
    args: (kc) => ['run', 'danm-endpoints', '--kubeconfig', kc, '--state', 'file:/proc/twopass-walk/state'],
    exit: 2,
    says: /--state file:\/proc\/twopass-walk\/state: cannot use it as the state directory: \/proc cannot hold a new directory/,
    oneLine: true,
  },
  {
    what: '--save-snapshot where no directory can be made (/proc)',
    args: (kc) => ['run', 'danm-endpoints', '--kubeconfig', kc, '--save-snapshot', '/proc/twopass-walk'],
    exit: 2,
    says: /--save-snapshot \/proc\/twopass-walk: cannot write there: \/proc cannot hold a new directory/,
    oneLine: true,
  },
  {
    what: '--state configmap: in a namespace that does not exist',
    args: (kc) => ['run', 'danm-endpoints', '--kubeconfig', kc, '--state', 'configmap:no-such-ns'],
    exit: 2,
    says: /--state configmap:no-such-ns: the namespace no-such-ns does not exist/,
  },
  {
    what: '--report into a path under a file',
    args: (kc) => ['run', 'danm-endpoints', '--kubeconfig', kc, '--report', `${file('plain2', 'x')}/r.json`],
    exit: 2,
    says: /--report .*: cannot write into .*: a part of the path is a file, not a directory/,
    oneLine: true,
  },
  {
    what: '--save-snapshot into a file',
    args: (kc) => [
      'run',
      'danm-endpoints',
      '--kubeconfig',
      kc,
      '--save-snapshot',
      `${file('plain3', 'x')}/d`,
    ],
    exit: 2,
    says: /--save-snapshot .*: cannot write there: a part of the path is a file/,
    oneLine: true,
  },
  {
    what: '--metrics-textfile naming a directory',
    args: (kc) => ['run', 'danm-endpoints', '--kubeconfig', kc, '--metrics-textfile', dir],
    exit: 2,
    says: /--metrics-textfile .*: is a directory; name a file/,
    oneLine: true,
  },
  {
    what: 'an unknown flag near a known one',
    args: () => ['run', 'danm-endpoints', '--aply'],
    exit: 2,
    says: /--aply: unknown option \(did you mean --apply\?\)/,
    oneLine: true,
  },
  {
    what: '--grace -1m',
    args: () => ['run', 'danm-endpoints', '--grace', '-1m'],
    exit: 2,
    says: /--grace: expected a value like `15m`, got `-1m`: a negative value is never valid/,
    oneLine: true,
  },
  {
    what: 'a config whose YAML is broken: the position, not a drawing of it',
    args: () => ['functions', '--config', file('frame.yaml', 'functions:\n  danm-endpoints:\n  grace: [\n')],
    exit: 2,
    says: /frame\.yaml: not valid YAML: .* at line \d+, column \d+/,
    oneLine: true,
  },
  {
    what: 'schedule --listen with a port above 65535',
    args: (kc) => ['schedule', '--kubeconfig', kc, '--listen', '127.0.0.1:99999'],
    exit: 2,
    says: /--listen: the port is at most 65535, got 99999/,
    oneLine: true,
  },
  { what: '`twopass help run`', args: () => ['help', 'run'], exit: 0, says: /Usage: twopass run/ },
  { what: '`twopass version`', args: () => ['version'], exit: 0, says: /^twopass \d+\.\d+\.\d+/ },
  {
    what: '`twopass demo --help` tells every scene',
    args: () => ['demo', '--help'],
    exit: 0,
    says: /whereabouts leak, an OpenStack load-balancer port\s+leak and CiliumEndpoints of gone pods/,
  },
  {
    what: 'rules with an unknown subcommand',
    args: () => ['rules', 'bogus', 'x'],
    exit: 2,
    says: /rules: unknown subcommand `bogus`/,
    oneLine: true,
  },
  {
    what: 'rules check of a rule named like a built-in function',
    args: () => [
      'rules',
      'check',
      file(
        'builtin-name.yaml',
        RULE.replace('name: x', 'name: danm-endpoints').replace(
          'INUSE',
          'object.metadata.uid in evidence.pods',
        ),
      ),
    ],
    exit: 2,
    says: /rule danm-endpoints .*a function of that name exists already/,
  },
  {
    what: 'rules check of a constant inUse',
    args: () => ['rules', 'check', file('const.yaml', RULE.replace('INUSE', '"false"'))],
    exit: 2,
    says: /reads neither the object nor the evidence/,
  },
  {
    what: 'rules check of a condition that scans the evidence',
    args: () => [
      'rules',
      'check',
      file('scan.yaml', RULE.replace('INUSE', 'evidence.pods.exists(p, p == object.metadata.uid)')),
    ],
    exit: 2,
    says: /iterates a whole evidence index/,
  },
  {
    what: 'rules check of a pattern RE2 refuses',
    args: () => [
      'rules',
      'check',
      file('lookbehind.yaml', RULE.replace('INUSE', `'object.metadata.name.matches("(?<=a)b")'`)),
    ],
    exit: 2,
    says: /invalid regular expression \(RE2 syntax/,
  },
];

/** A file store whose danm-endpoints state was cut off mid-write. */
function corruptStateDir(): string {
  const d = join(dir, 'corrupt-state');
  mkdirSync(d, { recursive: true });
  writeFileSync(join(d, 'danm-endpoints.json'), '{"revision": 3, "state": ');
  return d;
}

const test = suite<{ fake: FakeKubeServer; kc: string }>('every command, bad inputs');
test.before(async (ctx) => {
  ctx.fake = new FakeKubeServer();
  await ctx.fake.start();
  const admin = new KubeHttpClient({ server: ctx.fake.url, time: testTime() });
  await installCrdsFromDir(admin);
  await admin.close();
  ctx.kc = file('fake.kubeconfig', ctx.fake.kubeconfig());
});
test.after(async (ctx) => ctx.fake.stop());

for (const c of CASES)
  test(`${c.what}: exit ${c.exit}, a message, no stack trace, nothing written`, async ({ fake, kc }) => {
    const mark = fake.requests.length;
    const r = await twopassAsync(c.args(kc), c.env ?? {});
    const all = r.out + r.err;
    assert.is(r.code, c.exit, all.slice(-800));
    assert.match(all, c.says);
    assert.not.match(all, /\n\s+at .+:\d+:\d+\)?\n/, 'no stack trace');
    assert.not.match(all, /TypeError|ReferenceError|Cannot read properties/);
    assert.not.match(all, /: 0 [A-Z]/, 'no HTTP status 0 in messages');
    if (c.oneLine) assert.is(r.err.trimEnd().split('\n').length, 1, `one line: ${r.err}`);
    // a write the server refused (a Lease in a namespace that does not exist) wrote nothing
    const writes = fake.requests.slice(mark).filter((q) => q.method !== 'GET' && q.status < 400);
    assert.equal(writes, [], 'nothing written to the cluster');
  });

/** Runs the CLI and closes its stdout after the first bytes, as `| head -1` does. */
const closedAfterFirstLine = (args: string[]) =>
  spawnCli(args, (c) => c.stdout?.once('data', () => c.stdout?.destroy()));

for (const args of [['functions'], ['functions', '--output', 'json'], ['demo', '--output', 'json'], ['demo']])
  test(`\`twopass ${args.join(' ')} | head -1\`: ends quietly (exit 0, no EPIPE)`, async () => {
    const before = new Set(readdirSync(tmpdir()).filter((d) => d.startsWith('twopass-demo')));
    const r = await closedAfterFirstLine(args);
    assert.is(r.code, 0, r.err);
    assert.not.match(r.err, /EPIPE|\n\s+at /);
    const left = readdirSync(tmpdir()).filter((d) => d.startsWith('twopass-demo') && !before.has(d));
    assert.equal(left, [], 'the demo leaves nothing in the temp directory');
  });

test('`twopass run … | head -1` against a cluster: the run still ends with its own exit code', async ({
  kc,
}) => {
  const r = await closedAfterFirstLine([
    'run',
    'danm-endpoints',
    '--kubeconfig',
    kc,
    '--state',
    `file:${join(dir, 'piped')}`,
    '--record',
    '--output',
    'json',
  ]);
  assert.is(r.code, 0, r.err);
  assert.not.match(r.err, /EPIPE|\n\s+at /);
  assert.ok(
    readFileSync(join(dir, 'piped', 'danm-endpoints.json'), 'utf8').includes('"revision"'),
    'state saved',
  );
});

test('`twopass run --apply … | head -1`: a deleting run whose diff log is gone deletes nothing, exits 1 and says so on stderr', async ({
  fake,
  kc,
}) => {
  const admin = new KubeHttpClient({ server: fake.url, time: testTime() });
  const ep = await leakedEndpoint(admin, 'default', '10.10.10.77', 'piped-gone-0');
  const cfg = file(
    'piped-apply.yaml',
    'allowShortGrace: true\nfunctions:\n  danm-endpoints:\n    grace: 0s\n    minAge: 0s\n    maxDeletionPercent: 100\n    settings: { namespaces: [default] }\n',
  );
  const args = [...runWith(kc, cfg), '--state', `file:${join(dir, 'piped-apply')}`];
  assert.is((await twopassAsync([...args, '--record', '--output', 'json'])).code, 0);
  const mark = fake.requests.length;
  // the reader is gone before the run starts acting (`| head -1` once its line came)
  const r = await spawnCli([...args, '--apply', '--output', 'json'], (c) => c.stdout?.destroy());
  assert.is(r.code, 1, r.err);
  assert.match(r.err, /the diff log is gone \(its reader closed the pipe\): nothing deleted/);
  assert.not.match(r.err, /EPIPE|\n\s+at /);
  const deletes = fake.requests.slice(mark).filter((q) => q.method === 'DELETE');
  assert.equal(deletes, [], 'nothing deleted');
  assert.ok(await admin.get(R.danmeps, 'default', ep.metadata.name), 'the leaked DanmEp is still there');
  await admin.close();
});

test('`state accept-evidence --output json` prints one JSON object', async ({ kc }) => {
  const r = await twopassAsync([
    'state',
    'accept-evidence',
    'danm-endpoints',
    '--kubeconfig',
    kc,
    '--state',
    `file:${join(dir, 'accept-json')}`,
    '--output',
    'json',
  ]);
  assert.is(r.code, 0, r.err);
  const o = JSON.parse(r.out) as Record<string, unknown>;
  assert.is(o.function, 'danm-endpoints');
  assert.is(o.accepted, false, 'no drop to accept on a first snapshot');
  assert.is(o.deleted, 0);
  assert.type(o.baseline, 'object');
});

/** A server that is not Kubernetes: it answers every request 200 with `body`. */
async function notKubernetes(
  type: string,
  body: string,
): Promise<{ url: string; close: () => Promise<void> }> {
  const srv = createServer((_q, r) => {
    r.writeHead(200, { 'content-type': type });
    r.end(body);
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const { port } = srv.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, close: () => new Promise((r) => srv.close(() => r())) };
}

test('kubeconfig variants kubectl accepts, and servers that are not Kubernetes: one line each, the right exit code', async ({
  fake,
  kc,
}) => {
  const text = readFileSync(kc, 'utf8');
  const server = /server: "([^"]+)"/.exec(text)![1]!;
  const html = await notKubernetes('text/html', '<html><body>Sign in</body></html>');
  const status = await notKubernetes(
    'application/json',
    '{"kind":"Status","apiVersion":"v1","status":"Failure","code":401,"reason":"Unauthorized","message":"Unauthorized"}',
  );
  const show = ['state', 'show', 'danm-endpoints', '--state', 'configmap:default'];
  const cases: [string, string[], Record<string, string>, number, RegExp][] = [
    [
      'a current context that is not one of its contexts',
      ['--kubeconfig', file('ctx.kc', text.replace('current-context: fake', 'current-context: other'))],
      {},
      2,
      /kubeconfig .*ctx\.kc: its current context `other` is not one of its contexts \(fake\); pass --context NAME/,
    ],
    [
      '--context that is not in it',
      ['--kubeconfig', kc, '--context', 'nope'],
      {},
      2,
      /context `nope` is not in it \(contexts: fake\)/,
    ],
    ['a kubeconfig that is a directory', ['--kubeconfig', dir], {}, 2, /kubeconfig .*: is a directory/],
    [
      'a server that answers HTML',
      ['--kubeconfig', file('html.kc', text.replace(server, html.url))],
      {},
      3,
      /the answer is HTML, not JSON .*not a Kubernetes API server/,
    ],
    [
      'a server that answers a Status with 200',
      ['--kubeconfig', file('status.kc', text.replace(server, status.url))],
      {},
      3,
      /answered success with a Status \(401 Unauthorized: Unauthorized\)/,
    ],
    [
      'a server without a scheme, TLS asked for, plain HTTP there',
      ['--kubeconfig', file('noscheme.kc', text.replace(server, server.replace('http://', '')))],
      {},
      3,
      /TLS handshake failed: the server does not speak TLS/,
    ],
  ];
  try {
    for (const [what, args, env, code, says] of cases) {
      const r = await twopassAsync([...show, ...args], env);
      assert.is(r.code, code, `${what}: ${r.err}`);
      assert.match(r.err, says, what);
      assert.is(r.err.trimEnd().split('\n').length, 1, `${what}: one line: ${r.err}`);
    }
    // $KUBECONFIG with several files, one missing: kubectl skips it, and so does twopass
    const merged = await twopassAsync([...show, '--output', 'json'], {
      KUBECONFIG: `${join(dir, 'missing.kc')}:${kc}`,
    });
    assert.is(merged.code, 0, merged.err);
    assert.is((JSON.parse(merged.out) as { function: string }).function, 'danm-endpoints');
    assert.ok(fake.requests.length > 0);
  } finally {
    await html.close();
    await status.close();
  }
});

test('schedule --listen on a port in use: exit 2, one line', async ({ kc }) => {
  const busy = createServer();
  await new Promise<void>((r) => busy.listen(0, '127.0.0.1', () => r()));
  const { port } = busy.address() as AddressInfo;
  try {
    const r = await twopassAsync(['schedule', '--kubeconfig', kc, '--listen', `127.0.0.1:${port}`]);
    assert.is(r.code, 2, r.err);
    assert.match(r.err, new RegExp(`--listen 127\\.0\\.0\\.1:${port}: cannot listen: the port is in use`));
    assert.is(r.err.trimEnd().split('\n').length, 1, r.err);
  } finally {
    await new Promise<void>((r) => busy.close(() => r()));
  }
});

test.run();
