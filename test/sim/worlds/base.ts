/** What every simulated Kubernetes world shares: the SimKube, the interleave hook, read faults, the safety check on each write. */
import type { Rng } from '../rng.ts';
import { SimKube, type WriteEvent } from '../simkube.ts';

export abstract class SimKubeWorld {
  readonly kube: SimKube;
  readonly violations: string[] = [];
  protected interleave: (() => void) | undefined;
  protected writeInterleave: (() => void) | undefined;

  constructor(clock: () => number) {
    this.kube = new SimKube(clock);
    this.kube.beforeList = () => this.interleave?.();
    // The world moves between a cleaner's reads and its writes too (a batch's evidence and its write).
    this.kube.beforeWrite = (ref) => {
      if (ref.plural !== 'leases' && ref.plural !== 'configmaps') this.writeInterleave?.();
    };
    this.kube.onWrite = (e) => this.check(e);
  }

  /** Records a violation when a write of the cleaner hits something in use. */
  protected abstract check(e: WriteEvent): void;

  setInterleave(f: (() => void) | undefined, onWrite: (() => void) | undefined = f): void {
    this.interleave = f;
    this.writeInterleave = onWrite;
  }

  setFaults(rate: number, rng: Rng): void {
    this.kube.faultRate = rate;
    this.kube.rng = () => rng.next();
  }
}
