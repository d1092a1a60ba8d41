/**
 * Every command, walked with bad inputs the way an operator meets them: bad flags, bad
 * config, bad kubeconfig, no kubeconfig, an unreachable server, corrupt state, bad snapshot
 * files, a closed stdout. Each ends with one message (never a stack trace), the documented
 * exit code, and nothing written to the cluster.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { KubeHttpClient } from '../../shared/kube/client.ts';
import { installCrdsFromDir } from '../../shared/sandbox/crds.ts';
import { FakeKubeServer } from '../../shared/sandbox/kube/server.ts';
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
}>;

/** A command against a server that does not answer: exit 3, and a message that says so. */
const unreachable = (command: string, args: string[], says = /could not read what was asked/): Case => ({
  what: `${command} against an unreachable server`,
  args: () => [...args, '--kubeconfig', UNREACHABLE],
  exit: 3,
  says,
});

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
    args: (kc) => [
      'run',
      'danm-endpoints',
      '--kubeconfig',
      kc,
      '--config',
      file('typo.yaml', 'functions:\n  danm-endpoints:\n    settings: { namespace: [a] }\n'),
    ],
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
    const writes = fake.requests.slice(mark).filter((q) => q.method !== 'GET');
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

test.run();
