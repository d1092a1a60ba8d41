/** The exit codes of the run loop and the entry points (errors themselves: `shared/errors.ts`). */

export const EXIT = {
  ok: 0,
  error: 1,
  config: 2,
  incomplete: 3,
  refused: 4,
  locked: 5,
  approval: 6,
} as const;

export type ExitCode = (typeof EXIT)[keyof typeof EXIT];
