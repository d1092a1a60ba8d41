/** ch-k8s-lbaas worlds: Services in Kubernetes, tagged ports and floating IPs in the fake Neutron. */
import {
  CONTROLLER_DESCRIPTION,
  MANAGED_ANNOTATION,
  MANAGED_TAG,
  PORT_ANNOTATION,
} from '../../../functions/lbaas-ports/index.ts';
import type { KubeClient } from '../../kube/ports.ts';
import { type KubeObject, SERVICES } from '../../kube/resources.ts';
import type { FloatingIp, Port } from '../../openstack/neutron.ts';
import type { FakeOpenStack } from '../openstack/server.ts';

// Addresses stay unique across every world of one process (tests share the real cluster's Services).
let nextIp = 10;

/**
 * What the controller creates for a Service: a tagged port with a fixed IP, and a tagged FIP
 * on it. Shaped as its ports are: no name (a test may give one, to read its logs), empty
 * `device_owner` and `device_id`, no port security and no security groups.
 */
export function controllerPort(
  os: FakeOpenStack,
  opts: { name?: string; project?: string; extraTags?: string[]; untagged?: boolean; withFip?: boolean } = {},
): { port: Port; fip?: FloatingIp } {
  const n = nextIp++;
  const port = os.addPort({
    name: opts.name ?? '',
    description: CONTROLLER_DESCRIPTION,
    project_id: opts.project ?? 'project-a',
    tags: opts.untagged ? [] : [MANAGED_TAG, ...(opts.extraTags ?? [])],
    fixed_ips: [{ ip_address: `10.1.${(n >> 8) & 255}.${n & 255}`, subnet_id: 'subnet-1' }],
    device_owner: '',
    device_id: '',
    port_security_enabled: false,
    security_groups: [],
  });
  if (opts.withFip === false) return { port };
  const fip = os.addFip({
    floating_ip_address: `198.18.${(n >> 8) & 255}.${n & 255}`,
    port_id: port.id,
    fixed_ip_address: `10.1.${(n >> 8) & 255}.${n & 255}`,
    project_id: opts.project ?? 'project-a',
    tags: opts.untagged ? [] : [MANAGED_TAG],
    description: CONTROLLER_DESCRIPTION,
  });
  return { port, fip };
}

export async function createService(
  kube: KubeClient,
  ns: string,
  name: string,
  opts: {
    portId?: string;
    managed?: boolean;
    type?: 'LoadBalancer' | 'ClusterIP' | 'NodePort';
    annotations?: Record<string, string>;
  } = {},
): Promise<KubeObject> {
  const annotations: Record<string, string> = { ...opts.annotations };
  if (opts.managed !== false) annotations[MANAGED_ANNOTATION] = 'true';
  if (opts.portId) annotations[PORT_ANNOTATION] = opts.portId;
  return kube.create(SERVICES, {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: ns, annotations },
    spec: {
      type: opts.type ?? 'LoadBalancer',
      selector: { app: name },
      ports: [{ name: 'http', port: 80, protocol: 'TCP' }],
    },
  });
}

/** Writes status.loadBalancer.ingress through the status subresource, as the controller does. */
export async function setIngress(kube: KubeClient, ns: string, name: string, ip: string): Promise<void> {
  const svc = (await kube.get(SERVICES, ns, name))!;
  await kube.replaceStatus(SERVICES, { ...svc, status: { loadBalancer: { ingress: [{ ip }] } } });
}
