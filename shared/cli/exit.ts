/**
 * How a command ends when it fails: one line on stderr, the documented exit code, no stack
 * trace (TWOPASS_DEBUG=1 adds it), and a closed stdout (`| head`) ends it quietly.
 */
import { ConfigError, messageOf, TwopassError } from '../errors.ts';
import { EXIT, type ExitCode } from '../runtime/errors.ts';
import { LockHeldError } from '../state/errors.ts';
import type { Io } from './io.ts';

export function exitCodeOf(err: unknown): ExitCode {
  if (err instanceof ConfigError) return EXIT.config;
  if (err instanceof LockHeldError) return EXIT.locked;
  // The cluster or the cloud could not be reached, or answered something unusable.
  if (err instanceof TwopassError) return EXIT.incomplete;
  return EXIT.error;
}

export function reportFailure(err: unknown, io: Io): ExitCode {
  const code = exitCodeOf(err);
  const prefix = code === EXIT.incomplete ? 'could not read what was asked: ' : '';
  io.err.write(`twopass: ${prefix}${messageOf(err)}\n`);
  if (io.env.TWOPASS_DEBUG && err instanceof Error && err.stack) io.err.write(`${err.stack}\n`);
  return code;
}

/**
 * A reader that goes away (`twopass run … | head -1`) is not an error: later writes are
 * dropped and the command runs to its end (a run finishes its deletions or abandons them as
 * it would; the sandbox cleans up after itself), with the exit code it would have had.
 */
export function tolerateClosedPipe(stream: NodeJS.WriteStream): void {
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE' || err.code === 'ERR_STREAM_DESTROYED') return;
    throw err;
  });
}
