/** The sandbox's lbaas scene: the controller restart that deleted an in-use port (seeds/lbaas-port-lost-at-startup). */

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { lbaasPorts } from '../../../functions/lbaas-ports/index.ts';
import { resolveConfig } from '../../config.ts';
import { MINUTE as MIN } from '../../contract/index.ts';
import { SERVICES } from '../../kube/resources.ts';
import type { RunResult } from '../../runtime/run.ts';
import { FakeOpenStack } from '../openstack/server.ts';
import { type Scene, startScene } from '../pass.ts';
import { controllerPort, createService, setIngress } from '../scenarios/lbaas.ts';

export async function lbaasScene(s: Scene): Promise<{ runs: RunResult[]; problems: string[] }> {
  const { kube, stateDir, clock, advance, say } = s;
  const os = new FakeOpenStack({ now: clock });
  await os.start();
  try {
    // beside the sandbox's state, which the demo removes when it ends
    const clouds = join(stateDir, 'clouds.yaml');
    writeFileSync(clouds, os.cloudsYaml('appcred', 'sandbox'));
    const processEnv = { OS_CLOUD: 'sandbox', OS_CLIENT_CONFIG_FILE: clouds };
    const cfg = resolveConfig(
      {
        functions: {
          'lbaas-ports': {
            enabled: true,
            maxDeletionPercent: 100,
            maxEvidenceDropPercent: 100,
            settings: { projectId: 'project-a' },
          },
        },
      },
      'sandbox',
      { state: `file:${stateDir}` },
    );
    const { runs, problems, pass } = startScene(lbaasPorts, s, { cfg, processEnv });
    say('');
    say(`lbaas: a fake Keystone + Neutron on ${os.url} (project-a). ch-k8s-lbaas has placed two Services:`);
    const ingress = controllerPort(os, { name: 'ingress-nginx' });
    const old = controllerPort(os, { name: 'old-app' });
    await createService(kube, 'default', 'ingress-nginx-controller', { portId: ingress.port.id });
    await setIngress(kube, 'default', 'ingress-nginx-controller', ingress.fip!.floating_ip_address!);
    await createService(kube, 'default', 'old-app', { portId: old.port.id });
    await setIngress(kube, 'default', 'old-app', old.fip!.floating_ip_address!);
    say(
      `ingress-nginx-controller on port ${ingress.port.id.slice(0, 8)} (FIP ${ingress.fip!.floating_ip_address}), old-app on ${old.port.id.slice(0, 8)}.`,
    );
    say('The controller restarts; its in-memory port map is empty. Meanwhile old-app is deleted.');
    await kube.delete(SERVICES, 'default', 'old-app');
    await pass(
      'lbaas pass 1 (apply): ingress-nginx still names its port: in use. old-app: first observation',
    );
    advance(31 * MIN);
    await pass("lbaas pass 2 (apply): 31 minutes later: old-app's FIP, then its port, deleted with If-Match");
    if (!os.ports.has(ingress.port.id) || !os.fips.has(ingress.fip!.id))
      problems.push('the ingress-nginx port or FIP was deleted');
    if (os.ports.has(old.port.id) || os.fips.has(old.fip!.id))
      problems.push("old-app's port or FIP was not reclaimed");
    say(
      problems.length === 0
        ? `lbaas: ingress-nginx kept port ${ingress.port.id.slice(0, 8)} and ${ingress.fip!.floating_ip_address}; old-app's were reclaimed`
        : '',
    );
    return { runs, problems };
  } finally {
    await os.stop();
  }
}
