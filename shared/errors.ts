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

/** What a zod error is about, for `issuesText`. */
export type IssuesWording = Readonly<{
  /** Prefixes every line: the file or config the input came from. */
  where?: string;
  /** Names the input itself, for an issue without a path (default `(root)`). */
  root?: string;
  /** The path of the input inside its document (`functions.<fn>.settings`). */
  prefix?: readonly string[];
  /** The keys that are known, named after an unknown one. */
  known?: readonly string[];
  /** Only the first issue (a whole file that is not what it should be). */
  first?: boolean;
  /** On one line, `; ` between issues (inside a sentence: a reason, a note). */
  inline?: boolean;
}>;

/**
 * The one wording of a zod error in twopass: one line per issue,
 * `WHERE: \`the.key.path\`: message`, an unknown key named as such.
 */
export function issuesText(
  error: Readonly<{ issues: readonly ZodIssueLike[] }>,
  wording: IssuesWording = {},
): string {
  const { where, root = '(root)', prefix = [], known, first = false, inline = false } = wording;
  const issues = first ? error.issues.slice(0, 1) : error.issues;
  if (issues.length === 0) return `${where ? `${where}: ` : ''}invalid`;
  return issues
    .map((i) => {
      const key = [...prefix, ...i.path.map(String)].join('.') || root;
      const msg =
        i.code === 'unrecognized_keys'
          ? `unknown key(s) ${(i.keys ?? []).map((k) => `\`${k}\``).join(', ')}${known ? ` (known: ${known.join(', ')})` : ''}`
          : i.message;
      return `${where ? `${where}: ` : ''}\`${key}\`: ${msg}`;
    })
    .join(inline ? '; ' : '\n');
}

/** The parts of a zod issue `issuesText` reads (errors.ts stays free of packages). */
type ZodIssueLike = Readonly<{
  code: string;
  path: readonly PropertyKey[];
  message: string;
  keys?: readonly string[];
}>;
