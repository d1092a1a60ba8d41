/** The sandbox's lbaas scene: the controller restart that deleted an in-use port (seeds/lbaas-port-lost-at-startup). */

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { lbaasPorts } from '../../../functions/lbaas-ports/index.ts';
import { resolveConfig } from '../../config.ts';
import { MINUTE as MIN } from '../../contract/index.ts';
import { SERVICES } from '../../kube/resources.ts';
import { loadCloudConfig } from '../../openstack/config.ts';
import { Http } from '../../openstack/http.ts';
import { KeystoneAuth } from '../../openstack/keystone.ts';
import { NeutronClient } from '../../openstack/neutron.ts';
import type { RunResult } from '../../runtime/run.ts';
import { instantTime } from '../../time.ts';
import { FakeOpenStack } from '../openstack/server.ts';
import { type Scene, startScene } from '../pass.ts';
import { controllerPort, createService, setIngress } from '../scenarios/lbaas.ts';
import { StandInController } from '../scenarios/lbaas-controller.ts';

export async function lbaasScene(s: Scene): Promise<{ runs: RunResult[]; problems: string[] }> {
  const { kube, stateDir, clock, advance, say } = s;
  const os = new FakeOpenStack({ now: clock });
  await os.start();
  const http = new Http({ timeoutMs: 10_000, time: instantTime(clock) });
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
            settings: {
              projectId: 'project-a',
              controller: { namespace: 'kube-system', deployment: 'ch-k8s-lbaas-controller' },
            },
          },
        },
      },
      'sandbox',
      { state: `file:${stateDir}` },
    );
    const { runs, problems, pass } = startScene(lbaasPorts, s, { cfg, processEnv });
    // The controller as it really runs: a Deployment with a pod, its free ports in memory.
    const neutron = new NeutronClient(new KeystoneAuth(loadCloudConfig(processEnv), http, clock), http);
    const ctl = new StandInController({ kube, neutron, projectId: 'project-a', namespace: 'kube-system' });
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
    await ctl.start();
    await kube.delete(SERVICES, 'default', 'old-app');
    await pass(
      'lbaas pass 1 (apply): ingress-nginx still names its port: in use. old-app: first observation',
    );
    advance(31 * MIN);
    await pass(
      "lbaas pass 2 (apply): 31 minutes later old-app's port is confirmed, but the controller is running and holds it as free in memory (it could give it to a new Service with nothing written to Neutron): held, nothing deleted",
    );
    if (!os.ports.has(old.port.id)) problems.push("old-app's port was deleted while the controller ran");
    say(
      'The operator scales the controller to 0 (kubectl -n kube-system scale deploy/ch-k8s-lbaas-controller --replicas=0).',
    );
    await ctl.stop();
    advance(MIN);
    await pass(
      "lbaas pass 3 (apply): the controller is stopped: old-app's port, then its FIP, deleted with If-Match",
    );
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
    await http.close();
    await os.stop();
  }
}
