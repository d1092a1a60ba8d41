/** What a command may touch: its streams, its environment, its time. */
import type { Time } from '../time.ts';

export type Io = {
  out: NodeJS.WritableStream;
  err: NodeJS.WritableStream;
  env: Readonly<Record<string, string | undefined>>;
  isTTY: boolean;
  /** stderr is a terminal: progress may be drawn there. */
  errTTY?: boolean;
  time: Time;
};
