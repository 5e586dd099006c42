/** A model's `kubernetes` section (see kubernetes.ts for what kvgate reads from the cluster). */
import { GATEWAY_DEFAULTS } from './defaults.js';
import type { ConfigReader } from './reader.js';
import type { KubernetesDiscovery } from './types.js';

/** Reads a model's `kubernetes` section. */
export function readKubernetesSection(m: ConfigReader): KubernetesDiscovery | undefined {
  const k = m.child('kubernetes');
  if (k === undefined) return undefined;
  k.allowOnly(['api_server', 'namespace', 'service', 'port_name', 'token_file', 'ca_file', 'id_base']);
  const apiServer = k
    .str('api_server', GATEWAY_DEFAULTS.kubernetesApiServer, (s) =>
      /^https?:\/\/[^/\s]+\/?$/.test(s) ? undefined : 'must be an http(s)://host:port URL',
    )
    .replace(/\/+$/, '');
  const name = (s: string): string | undefined =>
    /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(s)
      ? undefined
      : 'must be a Kubernetes name (lowercase letters, digits, -)';
  return {
    apiServer,
    namespace: k.str('namespace', 'default', name),
    service: k.reqStr('service', name),
    portName: k.optStr('port_name'),
    tokenFile: k.str('token_file', GATEWAY_DEFAULTS.kubernetesTokenFile),
    caFile: k.str('ca_file', GATEWAY_DEFAULTS.kubernetesCaFile),
    idBase: k.int('id_base', GATEWAY_DEFAULTS.kubernetesIdBase, { min: 0, max: 2 ** 52 }),
  };
}
