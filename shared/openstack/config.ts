/**
 * OpenStack cloud configuration the OpenStack way: clouds.yaml (+ secure.yaml)
 * selected by OS_CLOUD, or the OS_* environment variables. Validated; errors
 * name the key and never echo a secret.
 */

import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { issuesText, yamlMessage } from '../errors.ts';
import { OpenStackConfigError } from './errors.ts';

export type AuthType = 'password' | 'v3applicationcredential';

export type CloudConfig = Readonly<{
  name: string;
  authType: AuthType;
  authUrl: string;
  username?: string;
  userId?: string;
  password?: string;
  userDomainName?: string;
  userDomainId?: string;
  projectName?: string;
  projectId?: string;
  projectDomainName?: string;
  projectDomainId?: string;
  applicationCredentialId?: string;
  applicationCredentialName?: string;
  applicationCredentialSecret?: string;
  regionName?: string;
  interface: 'public' | 'internal' | 'admin';
  source: string;
}>;

const authSchema = z
  .object({
    auth_url: z.string().url({ error: 'expected a URL like `https://keystone.example:5000/v3`' }),
    username: z.string().optional(),
    user_id: z.string().optional(),
    password: z.string().optional(),
    user_domain_name: z.string().optional(),
    user_domain_id: z.string().optional(),
    project_name: z.string().optional(),
    project_id: z.string().optional(),
    project_domain_name: z.string().optional(),
    project_domain_id: z.string().optional(),
    application_credential_id: z.string().optional(),
    application_credential_name: z.string().optional(),
    application_credential_secret: z.string().optional(),
  })
  .passthrough();

const cloudSchema = z
  .object({
    auth_type: z
      .enum(['password', 'v3password', 'v3applicationcredential'], {
        error: (i) => `expected password or v3applicationcredential, got ${JSON.stringify(i.input)}`,
      })
      .optional(),
    auth: authSchema,
    region_name: z.string().optional(),
    interface: z.enum(['public', 'internal', 'admin']).optional(),
  })
  .passthrough();

export const SEARCH_DIRS = (cwd: string) => [cwd, join(homedir(), '.config', 'openstack'), '/etc/openstack'];

function readYaml(path: string): Record<string, unknown> | undefined {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    // there but unreadable is not "not found": a Secret mounted 0400 for root, read as 65532
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EACCES' || code === 'EISDIR')
      throw new OpenStackConfigError(
        `${path}: cannot read it (${code === 'EACCES' ? 'permission denied: the file is there, but not readable by this user' : 'a directory'})`,
      );
    return undefined;
  }
  try {
    return (parseYaml(text, { logLevel: 'error' }) ?? {}) as Record<string, unknown>;
  } catch (err) {
    throw new OpenStackConfigError(`${path}: not valid YAML: ${yamlMessage(err)}`);
  }
}

function merge(a: unknown, b: unknown): unknown {
  if (a && b && typeof a === 'object' && typeof b === 'object' && !Array.isArray(a) && !Array.isArray(b)) {
    const out: Record<string, unknown> = { ...(a as Record<string, unknown>) };
    for (const [k, v] of Object.entries(b as Record<string, unknown>)) out[k] = merge(out[k], v);
    return out;
  }
  return b === undefined ? a : b;
}

/** Finds and validates the cloud: clouds.yaml when OS_CLOUD (or `cloud`) names one, else OS_* variables. */
export function loadCloudConfig(
  env: Readonly<Record<string, string | undefined>>,
  opts: { cloud?: string; cwd?: string } = {},
): CloudConfig {
  const cloudName = opts.cloud ?? env.OS_CLOUD;
  if (cloudName) {
    const candidates = env.OS_CLIENT_CONFIG_FILE
      ? [env.OS_CLIENT_CONFIG_FILE]
      : SEARCH_DIRS(opts.cwd ?? process.cwd()).map((d) => join(d, 'clouds.yaml'));
    for (const path of candidates) {
      const doc = readYaml(path);
      if (!doc) continue;
      const clouds = (doc.clouds ?? {}) as Record<string, unknown>;
      if (!Object.hasOwn(clouds, cloudName))
        throw new OpenStackConfigError(
          `${path}: clouds.${cloudName} not found (OS_CLOUD=${cloudName}); known: ${Object.keys(clouds).join(', ') || 'none'}`,
        );
      const securePath = join(path, '..', 'secure.yaml');
      const secure = readYaml(securePath);
      const merged = merge(
        clouds[cloudName],
        (secure?.clouds as Record<string, unknown> | undefined)?.[cloudName],
      );
      return fromCloud(cloudName, merged, `${path}${secure ? ` + ${securePath}` : ''}`);
    }
    throw new OpenStackConfigError(
      `OS_CLOUD=${cloudName}: no clouds.yaml found (looked in ${candidates.join(', ')})`,
    );
  }
  if (!env.OS_AUTH_URL)
    throw new OpenStackConfigError(
      'no OpenStack cloud configured: set OS_CLOUD (with a clouds.yaml) or OS_AUTH_URL and the other OS_* variables',
    );
  const at = env.OS_AUTH_TYPE;
  return fromCloud(
    'env',
    {
      ...(at ? { auth_type: at } : {}),
      region_name: env.OS_REGION_NAME,
      interface: env.OS_INTERFACE,
      auth: {
        auth_url: env.OS_AUTH_URL,
        username: env.OS_USERNAME,
        user_id: env.OS_USER_ID,
        password: env.OS_PASSWORD,
        user_domain_name: env.OS_USER_DOMAIN_NAME,
        user_domain_id: env.OS_USER_DOMAIN_ID,
        project_name: env.OS_PROJECT_NAME,
        project_id: env.OS_PROJECT_ID,
        project_domain_name: env.OS_PROJECT_DOMAIN_NAME,
        project_domain_id: env.OS_PROJECT_DOMAIN_ID,
        application_credential_id: env.OS_APPLICATION_CREDENTIAL_ID,
        application_credential_name: env.OS_APPLICATION_CREDENTIAL_NAME,
        application_credential_secret: env.OS_APPLICATION_CREDENTIAL_SECRET,
      },
    },
    'OS_* environment',
  );
}

function strip<T extends Record<string, unknown>>(o: T): T {
  for (const k of Object.keys(o)) if (o[k] === undefined || o[k] === '') delete o[k];
  return o;
}

/** The keys each auth type needs, and those that contradict it. */
function checkAuth(where: string, authType: AuthType, a: CloudAuth, hasAppCred: boolean): void {
  if (authType === 'v3applicationcredential') {
    if (a.password !== undefined)
      throw new OpenStackConfigError(
        `${where}: \`auth.password\` contradicts auth_type v3applicationcredential`,
      );
    if (a.application_credential_secret === undefined)
      throw new OpenStackConfigError(
        `${where}: \`auth.application_credential_secret\` is required for v3applicationcredential`,
      );
    if (
      a.application_credential_id === undefined &&
      (a.application_credential_name === undefined || (a.username === undefined && a.user_id === undefined))
    ) {
      throw new OpenStackConfigError(
        `${where}: \`auth.application_credential_id\` (or a name with username/user_id) is required`,
      );
    }
    if (a.project_id !== undefined || a.project_name !== undefined)
      throw new OpenStackConfigError(
        `${where}: an application credential is scoped already: remove \`auth.project_id\`/\`auth.project_name\``,
      );
  } else {
    if (hasAppCred)
      throw new OpenStackConfigError(`${where}: application credential keys contradict auth_type password`);
    if (a.username === undefined && a.user_id === undefined)
      throw new OpenStackConfigError(
        `${where}: \`auth.username\` or \`auth.user_id\` is required for password auth`,
      );
    if (a.password === undefined)
      throw new OpenStackConfigError(`${where}: \`auth.password\` is required for password auth`);
    if (a.project_id === undefined && a.project_name === undefined)
      throw new OpenStackConfigError(
        `${where}: \`auth.project_id\` or \`auth.project_name\` is required (twopass works in one project)`,
      );
    if (a.username !== undefined && a.user_domain_name === undefined && a.user_domain_id === undefined)
      throw new OpenStackConfigError(
        `${where}: \`auth.user_domain_name\` or \`auth.user_domain_id\` is required with a username`,
      );
    if (
      a.project_name !== undefined &&
      a.project_domain_name === undefined &&
      a.project_domain_id === undefined
    )
      throw new OpenStackConfigError(
        `${where}: \`auth.project_domain_name\` or \`auth.project_domain_id\` is required with a project name`,
      );
  }
}

export function fromCloud(name: string, raw: unknown, source: string): CloudConfig {
  const pre = raw && typeof raw === 'object' ? strip({ ...(raw as Record<string, unknown>) }) : raw;
  if (
    pre &&
    typeof pre === 'object' &&
    (pre as { auth?: unknown }).auth &&
    typeof (pre as { auth: unknown }).auth === 'object'
  )
    strip((pre as { auth: Record<string, unknown> }).auth);
  const r = cloudSchema.safeParse(pre);
  if (!r.success) {
    throw new OpenStackConfigError(`${source}: cloud ${name}: ${issuesText(r.error, { first: true })}`);
  }
  const c = r.data;
  const a = c.auth;
  const hasAppCred =
    a.application_credential_id !== undefined ||
    a.application_credential_name !== undefined ||
    a.application_credential_secret !== undefined;
  const authType: AuthType =
    c.auth_type === 'v3applicationcredential' || (c.auth_type === undefined && hasAppCred)
      ? 'v3applicationcredential'
      : 'password';
  const where = `${source}: cloud ${name}`;
  checkAuth(where, authType, a, hasAppCred);
  const o = <K extends string>(k: K, v: string | undefined) =>
    v !== undefined ? ({ [k]: v } as Record<K, string>) : {};
  return {
    name,
    authType,
    authUrl: a.auth_url.replace(/\/+$/, ''),
    ...o('username', a.username),
    ...o('userId', a.user_id),
    ...o('password', a.password),
    ...o('userDomainName', a.user_domain_name),
    ...o('userDomainId', a.user_domain_id),
    ...o('projectName', a.project_name),
    ...o('projectId', a.project_id),
    ...o('projectDomainName', a.project_domain_name),
    ...o('projectDomainId', a.project_domain_id),
    ...o('applicationCredentialId', a.application_credential_id),
    ...o('applicationCredentialName', a.application_credential_name),
    ...o('applicationCredentialSecret', a.application_credential_secret),
    ...o('regionName', c.region_name),
    interface: c.interface ?? 'public',
    source,
  };
}

type CloudAuth = z.output<typeof cloudSchema>['auth'];
