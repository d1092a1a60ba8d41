/**
 * Kubeconfigs as kubectl reads them (files, $KUBECONFIG lists, contexts, servers without a
 * scheme) turned into the client's options, and a minimal one for the fake servers.
 */
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { fsWhy, yamlMessage } from '../errors.ts';
import type { KubeClientOptions } from './options.ts';

/** A minimal token kubeconfig (for the sandbox's fake server and the test cluster). */
export function tokenKubeconfig(server: string, token: string, name = 'twopass'): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    `- name: ${name}`,
    `  cluster: { server: "${server}", insecure-skip-tls-verify: true }`,
    'users:',
    `- name: ${name}`,
    `  user: { token: "${token}" }`,
    'contexts:',
    `- name: ${name}`,
    `  context: { cluster: ${name}, user: ${name} }`,
    `current-context: ${name}`,
    '',
  ].join('\n');
}

/** Where a pod's ServiceAccount token, CA and namespace are mounted. */
export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/** Where a run looks for its credentials; the defaults are the process's (tests name others). */
export type ConfigPlaces = {
  env?: Readonly<Record<string, string | undefined>>;
  serviceAccountDir?: string;
};

/**
 * Builds client options from a kubeconfig file, $KUBECONFIG, ~/.kube/config or the in-cluster
 * account, in that order (as kubectl and client-go look).
 */
export async function kubeOptionsFromConfig(
  kubeconfig?: string,
  context?: string,
  places: ConfigPlaces = {},
): Promise<Omit<KubeClientOptions, 'time'>> {
  const env = places.env ?? process.env;
  const saDir = places.serviceAccountDir ?? SERVICE_ACCOUNT_DIR;
  // In a pod (the CronJobs) with no kubeconfig anywhere: the ServiceAccount, read here. The
  // client library is only loaded for kubeconfig files: importing it costs about a second of
  // every run's start (it loads every generated API model), for what is three files here.
  if (kubeconfig === undefined && context === undefined && !kubeconfigFileIn(env))
    return inClusterOptions(env, saDir);
  const { KubeConfig } = await import('@kubernetes/client-node');
  const kc = new KubeConfig();
  // The caller names an explicit file; the files of $KUBECONFIG are named here.
  const files = loadKubeconfigs(KubeConfig, kc, kubeconfig, env, saDir);
  const cluster = currentCluster(kc, context);
  let server = cluster.server;
  // As client-go: a server without a scheme is https when TLS is configured, else http.
  if (server && !/^[a-z][a-z0-9+.-]*:\/\//i.test(server))
    server = `${cluster.caData || cluster.caFile || cluster.skipTLSVerify ? 'https' : 'http'}://${server}`;
  try {
    new URL(server);
  } catch {
    throw new Error(`the server of cluster \`${cluster.name}\` is not a URL: \`${cluster.server}\``);
  }
  const opts: {
    headers?: Record<string, string>;
    ca?: Buffer;
    cert?: Buffer;
    key?: Buffer;
    rejectUnauthorized?: boolean;
    servername?: string;
  } = {};
  try {
    await kc.applyToHTTPSOptions(opts as never);
  } catch (err) {
    // the client library's words ("HTTP protocol is not allowed when skipTLSVerify is not set")
    if (server.startsWith('http://'))
      throw new Error(
        `the server of cluster \`${cluster.name}\` is plain HTTP (${server}): its credentials would travel unencrypted, so it is refused; use its https:// address (a test server on loopback may set \`insecure-skip-tls-verify: true\` on the cluster)`,
        { cause: err },
      );
    throw err;
  }
  const user = kc.getCurrentUser();
  const raw = user ? rawUser(files, user.name) : undefined;
  if (raw) {
    const unknown = Object.keys(raw).filter((k) => !UNDERSTOOD_AUTH.has(k));
    if (unknown.length > 0)
      throw new Error(
        `user \`${user!.name}\`: ${unknown.map((k) => `\`${k}\``).join(', ')} ${unknown.length === 1 ? 'is' : 'are'} not understood here (${IMPERSONATION.some((k) => unknown.includes(k)) ? 'impersonation would be dropped and the run would go out as another identity' : 'the run would go out without it'}): use a token, a token file, client certificates or an exec plugin`,
      );
    // kubectl's `tokenFile` (the client library reads only `token-file`): read as kubectl
    // does, whitespace trimmed, at every run (a projected token is rotated)
    const file = raw.tokenFile ?? raw['token-file'];
    if (typeof raw.token !== 'string' && typeof file === 'string') {
      let token: string;
      try {
        token = readFileSync(file, 'utf8').trim();
      } catch (err) {
        throw new Error(`user \`${user!.name}\`: token file ${file}: ${fsWhy(err)}`, { cause: err });
      }
      if (!token) throw new Error(`user \`${user!.name}\`: token file ${file} is empty`);
      opts.headers = { ...(opts.headers ?? {}), Authorization: `Bearer ${token}` };
    }
  }
  // a token read with its trailing newline is not a valid header
  const auth = opts.headers?.Authorization;
  if (typeof auth === 'string' && auth !== auth.trim())
    opts.headers = { ...opts.headers, Authorization: auth.trim() };
  const tls: { ca?: Buffer; cert?: Buffer; key?: Buffer; rejectUnauthorized?: boolean; servername?: string } =
    {};
  if (opts.ca) tls.ca = opts.ca;
  if (opts.cert) tls.cert = opts.cert;
  if (opts.key) tls.key = opts.key;
  if (opts.rejectUnauthorized !== undefined) tls.rejectUnauthorized = opts.rejectUnauthorized;
  if (opts.servername) tls.servername = opts.servername;
  return { server, headers: { ...(opts.headers ?? {}) }, tls };
}

/** The fields of a kubeconfig user that twopass acts on (anything else is refused, not dropped). */
const UNDERSTOOD_AUTH = new Set([
  'token',
  'tokenFile',
  'token-file',
  'client-certificate',
  'client-certificate-data',
  'client-key',
  'client-key-data',
  'exec',
  'auth-provider',
  'username',
  'password',
  'extensions',
]);
const IMPERSONATION = ['as', 'as-uid', 'as-groups', 'as-user-extra'];

/** The raw `user` map of a user, from the first of the files that names it (as kubectl merges). */
function rawUser(files: readonly string[], name: string): Record<string, unknown> | undefined {
  for (const f of files) {
    let doc: unknown;
    try {
      doc = parseYaml(readFileSync(f, 'utf8'));
    } catch {
      continue;
    }
    const users = (doc as { users?: { name?: unknown; user?: unknown }[] } | null)?.users;
    const u = Array.isArray(users) ? users.find((x) => x?.name === name) : undefined;
    if (u) return u.user && typeof u.user === 'object' ? (u.user as Record<string, unknown>) : {};
  }
  return undefined;
}

/**
 * Where a kubeconfig is looked for when none is named, in order; undefined when one is
 * there, else a message that says where it looked (instead of the client library's
 * fallback to http://localhost:8080 and its confusing TLS error).
 */
export function whereNoKubeconfig(
  env: Readonly<Record<string, string | undefined>>,
  serviceAccountDir = SERVICE_ACCOUNT_DIR,
): string | undefined {
  const looked: string[] = ['--kubeconfig: not given'];
  const paths = (env.KUBECONFIG ?? '').split(delimiter).filter((p) => p !== '');
  if (paths.some((p) => existsSync(p))) return undefined;
  looked.push(paths.length > 0 ? `$KUBECONFIG: ${paths.join(delimiter)} not found` : '$KUBECONFIG: not set');
  const home = join(env.HOME ?? homedir(), '.kube', 'config');
  if (existsSync(home)) return undefined;
  looked.push(`${home}: not found`);
  const token = join(serviceAccountDir, 'token');
  if (env.KUBERNETES_SERVICE_HOST && existsSync(token)) return undefined;
  looked.push(
    env.KUBERNETES_SERVICE_HOST
      ? `in-cluster: ${token} not found`
      : 'in-cluster: KUBERNETES_SERVICE_HOST not set',
  );
  return `no kubeconfig found (${looked.join('; ')}); pass --kubeconfig FILE or set KUBECONFIG`;
}

/** True when $KUBECONFIG names a file that exists, or ~/.kube/config exists (a kubeconfig wins over the pod's account). */
function kubeconfigFileIn(env: Readonly<Record<string, string | undefined>>): boolean {
  if ((env.KUBECONFIG ?? '') !== '') return true; // named: read (or refused) as kubectl would
  return existsSync(join(env.HOME ?? homedir(), '.kube', 'config'));
}

/**
 * The pod's own account, as client-go's in-cluster config: https to
 * KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT, the mounted CA, and the mounted token read
 * now (a projected token is rotated by the kubelet; every run reads the current one).
 */
export function inClusterOptions(
  env: Readonly<Record<string, string | undefined>>,
  serviceAccountDir = SERVICE_ACCOUNT_DIR,
): Omit<KubeClientOptions, 'time'> {
  const missing = whereNoKubeconfig(env, serviceAccountDir);
  if (missing) throw new Error(missing);
  const host = env.KUBERNETES_SERVICE_HOST!;
  const port = env.KUBERNETES_SERVICE_PORT;
  if (!port) throw new Error('in-cluster: KUBERNETES_SERVICE_HOST is set but KUBERNETES_SERVICE_PORT is not');
  const read = (name: string) => {
    const file = join(serviceAccountDir, name);
    try {
      return readFileSync(file);
    } catch (err) {
      throw new Error(`in-cluster: ${file}: ${fsWhy(err)}`, { cause: err });
    }
  };
  const token = read('token').toString('utf8').trim();
  if (!token) throw new Error(`in-cluster: ${join(serviceAccountDir, 'token')} is empty`);
  const server = `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
  try {
    new URL(server);
  } catch {
    throw new Error(`in-cluster: KUBERNETES_SERVICE_HOST/PORT do not make a URL: \`${server}\``);
  }
  return { server, headers: { Authorization: `Bearer ${token}` }, tls: { ca: read('ca.crt') } };
}

type KubeConfigClass = typeof import('@kubernetes/client-node').KubeConfig;

/** Loads the named file, or every file of $KUBECONFIG merged in order, or ~/.kube/config; the files read. */
function loadKubeconfigs(
  KubeConfig: KubeConfigClass,
  kc: InstanceType<KubeConfigClass>,
  kubeconfig: string | undefined,
  env: NodeJS.ProcessEnv,
  saDir: string,
): string[] {
  const files: string[] = [];
  const load = (file: string, into: InstanceType<typeof KubeConfig>, named = false) => {
    files.push(file);
    try {
      into.loadFromFile(file);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      const why = code ? fsWhy(err) : yamlMessage(err);
      throw new Error(named ? `${file}: ${why}` : why, { cause: err });
    }
  };
  if (kubeconfig !== undefined) load(kubeconfig, kc);
  else {
    const missing = whereNoKubeconfig(env, saDir);
    if (missing) throw new Error(missing);
    // As kubectl: every file of $KUBECONFIG that exists, merged in order (missing ones skipped).
    const found = (env.KUBECONFIG ?? '').split(delimiter).filter((p) => p !== '' && existsSync(p));
    if (found.length === 0) {
      const home = join(env.HOME ?? homedir(), '.kube', 'config');
      if (existsSync(home)) load(home, kc, true);
      // in a pod with --context: the client library's in-cluster config
      else kc.loadFromDefault();
    } else {
      load(found[0]!, kc, true);
      for (const f of found.slice(1)) {
        const more = new KubeConfig();
        load(f, more, true);
        kc.mergeConfig(more, true);
      }
    }
  }
  return files;
}

/** The cluster of the context asked, or of the current one; why not, when it cannot be had. */
function currentCluster(kc: InstanceType<KubeConfigClass>, context: string | undefined) {
  const names = kc.getContexts().map((c) => c.name);
  if (context !== undefined) {
    if (!names.includes(context))
      throw new Error(`context \`${context}\` is not in it (contexts: ${names.join(', ') || 'none'})`);
    kc.setCurrentContext(context);
  }
  const cluster = kc.getCurrentCluster();
  if (!cluster) {
    const current = kc.getCurrentContext();
    throw new Error(
      !current
        ? `it names no current context (contexts: ${names.join(', ') || 'none'}); pass --context NAME`
        : !names.includes(current)
          ? `its current context \`${current}\` is not one of its contexts (${names.join(', ') || 'none'}); pass --context NAME`
          : `the cluster of context \`${current}\` is not in it`,
    );
  }
  return cluster;
}
