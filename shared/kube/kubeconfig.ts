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
