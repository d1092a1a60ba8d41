/** Servers a test process started: SIGKILLed by PID when the process exits, however it exits. */
import type { ChildProcess } from 'node:child_process';

const children = new Set<ChildProcess>();
process.on('exit', () => {
  for (const c of children)
    if (c.pid && c.exitCode === null)
      try {
        process.kill(c.pid, 'SIGKILL');
      } catch {
        /* gone */
      }
});

export function track(c: ChildProcess): ChildProcess {
  children.add(c);
  c.once('exit', () => children.delete(c));
  return c;
}
