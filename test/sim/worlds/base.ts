/** What every simulated Kubernetes world shares: the SimKube, the interleave hook, read faults, the safety check on each write. */
import type { Rng } from '../rng.ts';
import { SimKube, type WriteEvent } from '../simkube.ts';

export abstract class SimKubeWorld {
  readonly kube: SimKube;
  readonly violations: string[] = [];
  protected interleave: (() => void) | undefined;

  constructor(clock: () => number) {
    this.kube = new SimKube(clock);
    this.kube.beforeList = () => this.interleave?.();
    this.kube.onWrite = (e) => this.check(e);
  }

  /** Records a violation when a write of the cleaner hits something in use. */
  protected abstract check(e: WriteEvent): void;

  setInterleave(f: (() => void) | undefined): void {
    this.interleave = f;
  }

  setFaults(rate: number, rng: Rng): void {
    this.kube.faultRate = rate;
    this.kube.rng = () => rng.next();
  }
}
