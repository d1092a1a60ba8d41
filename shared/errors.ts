/**
 * The one error base of twopass. Every error says which call failed (`call`), carries
 * the resource it was about in its message, keeps its `cause`, and says whether a later
 * attempt may succeed (`retryable`) or never will (terminal: bad configuration, corrupt
 * state, a server that answered something other than what was asked).
 */

export type ErrorContext = Readonly<Record<string, string | number | boolean | undefined>>;

export type TwopassErrorOptions = Readonly<{
  call?: string;
  cause?: unknown;
  context?: ErrorContext;
}>;

export abstract class TwopassError extends Error {
  /** The failing call, e.g. `list danm.k8s.io/v1 danmeps` or `config`. */
  readonly call: string;
  /** Typed facts about the failure, for logs (never secrets). */
  readonly context: ErrorContext;
  /** True when a later attempt (a retry, the next run) may succeed. */
  abstract readonly retryable: boolean;
  constructor(message: string, options: TwopassErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.call = options.call ?? 'run';
    this.context = options.context ?? {};
  }
}

/** Bad configuration or arguments: exit 2, a retry cannot help. */
export class ConfigError extends TwopassError {
  override name = 'ConfigError';
  readonly retryable = false;
  constructor(message: string, options: TwopassErrorOptions = {}) {
    super(message, { call: 'config', ...options });
  }
}

/** A list that could not be proven complete (law 1): the run decides nothing; the next run may succeed. */
export class ListIncompleteError extends TwopassError {
  override name = 'ListIncompleteError';
  readonly retryable = true;
  constructor(call: string, message: string, options: Omit<TwopassErrorOptions, 'call'> = {}) {
    super(`${call}: list incomplete: ${message}`, { ...options, call });
  }
}

/** The API a function needs is not served (not installed, or this identity may not discover it). */
export class NotInstalledError extends TwopassError {
  override name = 'NotInstalledError';
  readonly retryable = true;
}

/** The failing call of any error: its own `call` when it is one of ours. */
export function callOf(err: unknown, fallback: string): string {
  return err instanceof TwopassError ? err.call : fallback;
}

export function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** A YAML parser's error in one line: its first line (the position), without the drawing of the source under it. */
export function yamlMessage(err: unknown): string {
  return messageOf(err).split('\n')[0]!.replace(/:$/, '');
}

const FS_WHY: Readonly<Record<string, string>> = {
  ENOENT: 'does not exist',
  ENOTDIR: 'a part of the path is a file, not a directory',
  EEXIST: 'exists and is not a directory',
  EISDIR: 'is a directory',
  EACCES: 'permission denied',
  EPERM: 'permission denied',
  EROFS: 'the file system is read-only',
  ENOSPC: 'no space left on the device',
};

/** A file-system error in plain words (`ENOTDIR` and the like), without Node's syscall and path. */
export function fsWhy(err: unknown): string {
  const code = (err as NodeJS.ErrnoException).code;
  return (code && FS_WHY[code]) ?? messageOf(err);
}
