/**
 * The fake's Keystone (identity v3): tokens issued for a password or an application
 * credential (with the catalog and an expiry), revoked, and a project shown to its members
 * and to an admin.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { FakeAppCred, FakeUser, Send, TokenInfo } from './common.ts';

export type KeystoneState = Readonly<{
  users: readonly FakeUser[];
  appCreds: readonly FakeAppCred[];
  tokens: Map<string, TokenInfo>;
  tokenTtlMs: number;
  url: string;
  authUrl: string;
  now: () => number;
}>;

/** Answers an identity request; false when the path is not Keystone's. */
export function serveIdentity(
  k: KeystoneState,
  req: IncomingMessage,
  url: URL,
  method: string,
  raw: string,
  send: Send,
): boolean {
  const answer = (...a: Parameters<Send>) => {
    send(...a);
    return true;
  };
  if (url.pathname === '/identity/v3/auth/tokens' && method === 'POST') {
    issueToken(k, raw, send);
    return true;
  }
  if (url.pathname === '/identity/v3/auth/tokens' && method === 'DELETE') {
    // revocation: X-Auth-Token authenticates, X-Subject-Token is revoked (a token may revoke itself)
    const by = req.headers['x-auth-token'];
    const subject = req.headers['x-subject-token'];
    if (typeof by !== 'string' || !k.tokens.has(by))
      return answer(401, {
        error: {
          code: 401,
          title: 'Unauthorized',
          message: 'The request you have made requires authentication.',
        },
      });
    if (typeof subject !== 'string' || !k.tokens.delete(subject))
      return answer(404, { error: { code: 404, title: 'Not Found', message: 'Could not find token.' } });
    return answer(204, undefined);
  }
  const project = /^\/identity\/v3\/projects\/([^/]+)$/.exec(url.pathname);
  if (project && method === 'GET') {
    // a project is shown to its own members and to an admin
    const tk = req.headers['x-auth-token'];
    const by = typeof tk === 'string' ? k.tokens.get(tk) : undefined;
    if (!by)
      return answer(401, {
        error: { code: 401, message: 'The request you have made requires authentication.' },
      });
    const id = decodeURIComponent(project[1]!);
    const known = k.users.some((u) => u.projectId === id) || k.appCreds.some((c) => c.projectId === id);
    if (!known) return answer(404, { error: { code: 404, message: `Could not find project: ${id}.` } });
    if (!by.admin && by.projectId !== id)
      return answer(403, {
        error: { code: 403, message: 'You are not authorized to perform the requested action.' },
      });
    return answer(200, { project: { id, name: id, domain_id: 'default' } });
  }
  return false;
}

function issueToken(k: KeystoneState, raw: string, send: Send): void {
  let body: {
    auth?: {
      identity?: {
        methods?: string[];
        password?: { user?: { name?: string; password?: string; domain?: { name?: string } } };
        application_credential?: { id?: string; secret?: string };
      };
      scope?: { project?: { name?: string; id?: string } };
    };
  };
  try {
    body = JSON.parse(raw);
  } catch {
    send(400, { error: { code: 400, message: 'Malformed request body' } });
    return;
  }
  const id = body.auth?.identity;
  let projectId: string | undefined;
  let admin = false;
  if (id?.methods?.includes('application_credential')) {
    if (body.auth?.scope) {
      send(401, { error: { code: 401, message: 'Application credentials cannot request a scope.' } });
      return;
    }
    const c = k.appCreds.find(
      (a) => a.id === id.application_credential?.id && a.secret === id.application_credential?.secret,
    );
    projectId = c?.projectId;
  } else if (id?.methods?.includes('password')) {
    const u = id.password?.user;
    const user = k.users.find(
      (x) => x.name === u?.name && x.password === u?.password && x.domain === u?.domain?.name,
    );
    const p = body.auth?.scope?.project;
    if (user && (p?.id === user.projectId || p?.name === user.projectName)) {
      projectId = user.projectId;
      admin = user.admin === true;
    }
  }
  if (!projectId) {
    send(401, {
      error: {
        code: 401,
        title: 'Unauthorized',
        message: 'The request you have made requires authentication.',
      },
    });
    return;
  }
  const token = `fake-token-${randomUUID()}`;
  const expiresAt = k.now() + k.tokenTtlMs;
  k.tokens.set(token, { projectId, expiresAt, admin });
  const ep = (iface: string) => ({
    id: randomUUID(),
    interface: iface,
    region_id: 'RegionOne',
    region: 'RegionOne',
    url: `${k.url}/network`,
  });
  send(
    201,
    {
      token: {
        methods: id?.methods ?? [],
        expires_at: new Date(expiresAt).toISOString(),
        issued_at: new Date(k.now()).toISOString(),
        project: {
          id: projectId,
          name: admin ? 'admin' : 'k8s-a',
          domain: { id: 'default', name: 'Default' },
        },
        roles: admin ? [{ id: 'role-admin', name: 'admin' }] : [{ id: 'role-member', name: 'member' }],
        catalog: [
          {
            type: 'identity',
            name: 'keystone',
            endpoints: [{ id: randomUUID(), interface: 'public', region_id: 'RegionOne', url: k.authUrl }],
          },
          { type: 'network', name: 'neutron', endpoints: [ep('public'), ep('internal')] },
          {
            type: 'block-storage',
            name: 'cinderv3',
            endpoints: ['public', 'internal'].map((iface) => ({
              ...ep(iface),
              url: `${k.url}/volume/v3/${projectId}`,
            })),
          },
        ],
      },
    },
    { 'x-subject-token': token },
  );
}
