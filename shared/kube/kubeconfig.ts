/**
 * Kubeconfigs as kubectl reads them (files, $KUBECONFIG lists, contexts, servers without a
 * scheme) turned into the client's options, and a minimal one for the fake servers.
 */
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, join } from 'node:path';
import { fsWhy, yamlMessage } from '../errors.ts';
import type { KubeClientOptions } from './client.ts';

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

/** Builds client options from a kubeconfig file, $KUBECONFIG, ~/.kube/config or the in-cluster account. */
export async function kubeOptionsFromConfig(
  kubeconfig?: string,
  context?: string,
): Promise<Omit<KubeClientOptions, 'time'>> {
  const { KubeConfig } = await import('@kubernetes/client-node');
  const kc = new KubeConfig();
  // The caller names an explicit file; the files of $KUBECONFIG are named here.
  const load = (file: string, into: InstanceType<typeof KubeConfig>, named = false) => {
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
    const missing = whereNoKubeconfig(process.env);
    if (missing) throw new Error(missing);
    // As kubectl: every file of $KUBECONFIG that exists, merged in order (missing ones skipped).
    const files = (process.env.KUBECONFIG ?? '').split(delimiter).filter((p) => p !== '' && existsSync(p));
    if (files.length === 0) kc.loadFromDefault();
    else {
      load(files[0]!, kc, true);
      for (const f of files.slice(1)) {
        const more = new KubeConfig();
        load(f, more, true);
        kc.mergeConfig(more, true);
      }
    }
  }
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
  await kc.applyToHTTPSOptions(opts as never);
  const tls: { ca?: Buffer; cert?: Buffer; key?: Buffer; rejectUnauthorized?: boolean; servername?: string } =
    {};
  if (opts.ca) tls.ca = opts.ca;
  if (opts.cert) tls.cert = opts.cert;
  if (opts.key) tls.key = opts.key;
  if (opts.rejectUnauthorized !== undefined) tls.rejectUnauthorized = opts.rejectUnauthorized;
  if (opts.servername) tls.servername = opts.servername;
  return { server, headers: { ...(opts.headers ?? {}) }, tls };
}

/**
 * Where a kubeconfig is looked for when none is named, in order; undefined when one is
 * there, else a message that says where it looked (instead of the client library's
 * fallback to http://localhost:8080 and its confusing TLS error).
 */
export function whereNoKubeconfig(env: Readonly<Record<string, string | undefined>>): string | undefined {
  const looked: string[] = ['--kubeconfig: not given'];
  const paths = (env.KUBECONFIG ?? '').split(delimiter).filter((p) => p !== '');
  if (paths.some((p) => existsSync(p))) return undefined;
  looked.push(paths.length > 0 ? `$KUBECONFIG: ${paths.join(delimiter)} not found` : '$KUBECONFIG: not set');
  const home = join(env.HOME ?? homedir(), '.kube', 'config');
  if (existsSync(home)) return undefined;
  looked.push(`${home}: not found`);
  const token = '/var/run/secrets/kubernetes.io/serviceaccount/token';
  if (env.KUBERNETES_SERVICE_HOST && existsSync(token)) return undefined;
  looked.push(
    env.KUBERNETES_SERVICE_HOST
      ? `in-cluster: ${token} not found`
      : 'in-cluster: KUBERNETES_SERVICE_HOST not set',
  );
  return `no kubeconfig found (${looked.join('; ')}); pass --kubeconfig FILE or set KUBECONFIG`;
}
