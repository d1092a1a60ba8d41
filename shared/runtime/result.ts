/** The run's result vocabulary lives below the runtime (shared/outcome.ts); the runtime's own modules read it here. */
export type { Finish, LogSink, RunHooks, RunOutcome, RunResult } from '../outcome.ts';
