/**
 * Servers a test process started: stopped by PID however the process ends. On a normal exit
 * they are SIGKILLed. On SIGTERM, SIGINT or SIGHUP (a runner stopped by hand or by CI's
 * timeout) they are first asked to stop with SIGTERM, so that servers with children of their
 * own stop those too, given up to 3 s, and then the process exits (killing what is left).
 */
import type { ChildProcess } from 'node:child_process';

const children = new Set<ChildProcess>();
const running = (c: ChildProcess) => c.pid !== undefined && c.exitCode === null && c.signalCode === null;
const signal = (c: ChildProcess, s: NodeJS.Signals) => {
  try {
    process.kill(c.pid!, s);
  } catch {
    /* gone */
  }
};

process.on('exit', () => {
  for (const c of children) if (running(c)) signal(c, 'SIGKILL');
});

let stopping = false;
function onSignal(code: number): () => void {
  return () => {
    if (stopping) return;
    stopping = true;
    for (const c of children) if (running(c)) signal(c, 'SIGTERM');
    const until = Date.now() + 3000;
    const wait = () => {
      if ([...children].some(running) && Date.now() < until) setTimeout(wait, 50);
      else process.exit(code);
    };
    wait();
  };
}
process.once('SIGTERM', onSignal(143));
process.once('SIGINT', onSignal(130));
process.once('SIGHUP', onSignal(129));

export function track(c: ChildProcess): ChildProcess {
  children.add(c);
  c.once('exit', () => children.delete(c));
  return c;
}
