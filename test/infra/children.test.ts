/**
 * A test process stopped by a signal stops the servers it started (test/helpers/children.ts):
 * a runner killed by hand or by CI's timeout leaves nothing listening.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const)
  test(`${sig}: the servers it tracked are stopped, and it exits`, async () => {
    const script = `
      import { spawn } from 'node:child_process';
      import { track } from ${JSON.stringify(new URL('../helpers/children.ts', import.meta.url).pathname)};
      const c = track(spawn('sleep', ['300'], { stdio: 'ignore' }));
      process.stdout.write(String(c.pid) + String.fromCharCode(10));
      setInterval(() => {}, 1000);`;
    const parent = spawn(process.execPath, ['--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const [chunk] = (await once(parent.stdout!, 'data')) as [Buffer];
    const server = Number(chunk.toString().trim());
    assert.ok(server > 0 && alive(server), `the server runs (${chunk.toString()})`);
    parent.kill(sig);
    const [code] = (await once(parent, 'exit')) as [number | null];
    assert.is(code, { SIGTERM: 143, SIGINT: 130, SIGHUP: 129 }[sig]);
    // the server was signalled before the parent exited; give the kernel a moment to reap it
    for (let i = 0; i < 50 && alive(server); i++) await new Promise((r) => setTimeout(r, 20));
    assert.not.ok(alive(server), `the server ${server} still runs after the runner got ${sig}`);
  });

test.run();
