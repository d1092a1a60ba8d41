/** The exit codes live below the runtime (shared/exit.ts); the runtime's own modules read them here. */
export { EXIT, type ExitCode } from '../exit.ts';
