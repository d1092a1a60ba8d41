/** Errors of the run loop and the entry points, with their exit codes. */

export const EXIT = {
  ok: 0,
  error: 1,
  config: 2,
  incomplete: 3,
  refused: 4,
  locked: 5,
} as const;

export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/** Bad configuration or arguments (exit 2). */
export class ConfigError extends Error {
  override name = 'ConfigError';
}
