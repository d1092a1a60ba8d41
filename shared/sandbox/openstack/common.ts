/** What the fake OpenStack's parts share: how they answer, a token's facts, Neutron's If-Match. */
import type { FloatingIp, Port, SecurityGroup } from '../../openstack/neutron.ts';
import { parseIfMatch } from './neutron-rules.ts';

export type Send = (status: number, body: unknown, headers?: Record<string, string>) => void;

/** Answers 400 (a malformed If-Match) or 412 (another revision) as Neutron does; true when it answered. */
export function refusedByIfMatch(im: string | undefined, revision: number | undefined, send: Send): boolean {
  const cond = parseIfMatch(im);
  if (cond.kind === 'bad') {
    send(400, { NeutronError: { type: 'BadRequest', message: cond.message, detail: '' } });
    return true;
  }
  if (cond.kind === 'revision' && cond.revision !== revision) {
    send(412, {
      NeutronError: {
        type: 'RevisionNumberConstraintFailed',
        message: `Constrained to ${im}, but current revision is ${revision}`,
        detail: '',
      },
    });
    return true;
  }
  return false;
}
export type TokenInfo = { projectId: string; expiresAt: number; admin: boolean };
export const NOT_FOUND = {
  NeutronError: { type: 'HTTPNotFound', message: 'The resource could not be found.', detail: '' },
};

export type FakeUser = {
  name: string;
  domain: string;
  password: string;
  projectId: string;
  projectName: string;
  /** The admin role: its tokens see every project's resources (`project_id` filters them). */
  admin?: boolean;
};
export type FakeAppCred = { id: string; secret: string; projectId: string };

/** What the Neutron handlers read and write of the fake (FakeOpenStack is one). */
export type NeutronState = {
  readonly ports: Map<string, Port>;
  readonly fips: Map<string, FloatingIp>;
  readonly securityGroups: Map<string, SecurityGroup>;
  readonly routers: Map<string, { id: string; project_id: string; name: string; ports: string[] }>;
  readonly deleteIfMatch: (string | undefined)[];
  readonly extensions: string[];
  readonly pagination: boolean;
  addPort(p: Partial<Port> & { id?: string }): Port;
  addFip(f: Partial<FloatingIp> & { id?: string }): FloatingIp;
  addSecurityGroup(g: Partial<SecurityGroup> & { id?: string }): SecurityGroup;
  defaultGroup(projectId: string): { id: string };
  update<T extends Port | FloatingIp>(obj: T, change: Partial<T>): T;
};
