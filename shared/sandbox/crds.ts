/** Installs the CRD manifests that ship with twopass (used by the sandbox and tests). */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import type { KubeClient } from '../kube/ports.ts';
import { packageRoot } from '../paths.ts';

export const CRD_DIR = join(packageRoot(), 'shared', 'sandbox', 'crds');
const CRDS = {
  group: 'apiextensions.k8s.io',
  version: 'v1',
  plural: 'customresourcedefinitions',
  kind: 'CustomResourceDefinition',
  namespaced: false,
};

/** Creates the CRDs of the named files (`danm`, `whereabouts`), or all of them. */
export async function installCrdsFromDir(kube: KubeClient, ...only: string[]): Promise<void> {
  for (const f of readdirSync(CRD_DIR)
    .filter((n) => n.endsWith('.yaml'))
    .sort()) {
    if (only.length > 0 && !only.includes(f.replace(/\.yaml$/, ''))) continue;
    for (const doc of parseAllDocuments(readFileSync(join(CRD_DIR, f), 'utf8'))) {
      const crd = doc.toJS() as { metadata: Record<string, unknown> } | null;
      if (!crd) continue;
      try {
        await kube.create(CRDS, crd);
      } catch (err) {
        if (!String((err as Error).message).includes('AlreadyExists')) throw err;
      }
    }
  }
}
