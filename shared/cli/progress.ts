/**
 * List progress on a terminal's stderr (DESIGN section 5): what is being listed, pages,
 * items and rate, redrawn in place at most five times a second and cleared before each
 * diff-log row. Never in JSON mode and never when stderr is not a terminal.
 */
export type Progress = Readonly<{
  onPage: (p: { what: string; pages: number; items: number }) => void;
  /** Wraps the stream the table is written to: the progress line is cleared first. */
  around: (out: NodeJS.WritableStream) => NodeJS.WritableStream;
  clear: () => void;
}>;

export function terminalProgress(err: NodeJS.WritableStream, now: () => number): Progress {
  const started = new Map<string, number>();
  let drawn = false;
  let lastDraw = Number.NEGATIVE_INFINITY;
  const clear = () => {
    if (drawn) err.write('\r\x1b[K');
    drawn = false;
  };
  return {
    onPage: ({ what, pages, items }) => {
      const t = now();
      if (!started.has(what)) started.set(what, t);
      if (t - lastDraw < 200) return;
      lastDraw = t;
      const seconds = Math.max((t - started.get(what)!) / 1000, 0.001);
      err.write(`\r\x1b[K${what}: ${pages} page(s), ${items} items, ${Math.round(items / seconds)}/s`);
      drawn = true;
    },
    around: (out) =>
      ({
        write: (chunk: string | Uint8Array, ...rest: unknown[]) => {
          clear();
          return (out.write as (...a: unknown[]) => boolean)(chunk, ...rest);
        },
      }) as NodeJS.WritableStream,
    clear,
  };
}
