/**
 * The first command a new user types: `npm install` in a fresh clone, with the machine's own
 * Node and npm (not the Node 24 the project brings), prints nothing that reads as a failure.
 * The one warning left (the engine check of a Node older than the project's, on the system
 * Node 20) is the one README explains, and the project's Node 24 is installed all the same.
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

const ROOT = new URL('../..', import.meta.url).pathname;

/** PATH as a user's shell has it: without the project's node_modules/.bin (where npm scripts put Node 24). */
const userPath = (process.env.PATH ?? '')
  .split(delimiter)
  .filter((p) => !p.includes('node_modules'))
  .join(delimiter);

test('npm install in a fresh copy: exit 0, no install-script warning, Node 24 in place; an engine warning only on an older system Node, and README says why', () => {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-install-'));
  try {
    for (const f of ['package.json', 'package-lock.json', '.npmrc'])
      copyFileSync(join(ROOT, f), join(dir, f));
    const env: NodeJS.ProcessEnv = { ...process.env, PATH: userPath };
    for (const k of Object.keys(env)) if (k.startsWith('npm_')) delete env[k];
    const systemNode = spawnSync('node', ['--version'], { encoding: 'utf8', env }).stdout.trim();
    const r = spawnSync('npm', ['install', '--prefer-offline', '--no-audit'], {
      cwd: dir,
      encoding: 'utf8',
      env,
      timeout: 600_000,
    });
    const said = `${r.stdout}\n${r.stderr}`;
    assert.is(r.status, 0, said);
    const warnings = said.split('\n').filter((l) => /^npm (warn|WARN|error|ERR)/.test(l));
    assert.equal(
      warnings.filter((l) => /install-scripts|allowScripts/.test(l)),
      [],
      "the node package's install script is approved in package.json (allowScripts)",
    );
    const other = warnings.filter((l) => !/EBADENGINE/.test(l));
    assert.equal(other, [], `only engine warnings may be printed:\n${said}`);
    const [major] = systemNode.replace(/^v/, '').split('.').map(Number);
    if ((major ?? 0) >= 24) assert.equal(warnings, [], `Node ${systemNode}: no warning at all`);
    else if (warnings.length > 0)
      assert.match(
        readFileSync(join(ROOT, 'README.md'), 'utf8'),
        /EBADENGINE/,
        'README says why the engine warning appears and that it is expected',
      );
    const brought = spawnSync(join(dir, 'node_modules/node/bin/node'), ['--version'], { encoding: 'utf8' });
    assert.match(brought.stdout, /^v24\./, 'the Node that npm scripts run on');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
