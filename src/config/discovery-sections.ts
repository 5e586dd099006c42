/**
 * A model's discovery sections: `etcd` (see etcd.ts for the registrations under its prefix), `kubernetes` and
 * `inference_pool` (see kubernetes.ts for what kvgate reads from the cluster).
 */
import { checkHttpUrl } from './checks.js';
import { GATEWAY_DEFAULTS } from './defaults.js';
import { show, type ConfigReader } from './reader.js';
import type { EtcdDiscovery, InferencePoolDiscovery, KubernetesDiscovery } from './types.js';

/** The fields both sections share: how to reach the API server, and the namespace. */
const API_KEYS = ['api_server', 'namespace', 'token_file', 'ca_file'] as const;

const k8sName = (s: string): string | undefined =>
  /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(s)
    ? undefined
    : 'must be a Kubernetes name (lowercase letters, digits, -)';

function readApi(k: ConfigReader): { apiServer: string; namespace: string; tokenFile: string; caFile: string } {
  const apiServer = k
    .str('api_server', GATEWAY_DEFAULTS.kubernetesApiServer, (s) =>
      /^https?:\/\/[^/\s]+\/?$/.test(s) ? undefined : 'must be an http(s)://host:port URL',
    )
    .replace(/\/+$/, '');
  return {
    apiServer,
    namespace: k.str('namespace', 'default', k8sName),
    tokenFile: k.str('token_file', GATEWAY_DEFAULTS.kubernetesTokenFile),
    caFile: k.str('ca_file', GATEWAY_DEFAULTS.kubernetesCaFile),
  };
}

/** Reads a model's `kubernetes` section. */
export function readKubernetesSection(m: ConfigReader): KubernetesDiscovery | undefined {
  const k = m.child('kubernetes');
  if (k === undefined) return undefined;
  k.allowOnly([...API_KEYS, 'service', 'port_name', 'id_base']);
  const api = readApi(k);
  return {
    ...api,
    service: k.reqStr('service', k8sName),
    portName: k.optStr('port_name'),
    idBase: k.int('id_base', GATEWAY_DEFAULTS.kubernetesIdBase, { min: 0, max: 2 ** 52 }),
  };
}

/** Reads a model's `inference_pool` section. */
export function readInferencePoolSection(m: ConfigReader): InferencePoolDiscovery | undefined {
  const k = m.child('inference_pool');
  if (k === undefined) return undefined;
  k.allowOnly([...API_KEYS, 'name', 'fallbacks', 'conformance_hooks']);
  return {
    ...readApi(k),
    name: k.reqStr('name', k8sName),
    fallbacks: k.int('fallbacks', GATEWAY_DEFAULTS.pickerFallbacks, { min: 1, max: 16 }),
    conformanceHooks: k.bool('conformance_hooks', false),
  };
}

/** Reads a model's `etcd` section: `endpoints` (http(s) URLs, at least one) and `prefix`. */
export function readEtcdSection(m: ConfigReader): EtcdDiscovery | undefined {
  const e = m.child('etcd');
  if (e === undefined) return undefined;
  e.allowOnly(['endpoints', 'prefix']);
  const list = e.list('endpoints') ?? [];
  if (list.length === 0) e.problem('endpoints', 'must list at least one etcd endpoint (http://host:2379)');
  const endpoints: string[] = [];
  list.forEach((v, i) => {
    const reason = typeof v === 'string' ? checkHttpUrl(v) : `must be a string, got ${show(v)}`;
    if (reason !== undefined) e.problemAt([...e.path, 'endpoints', i], reason);
    else endpoints.push((v as string).replace(/\/+$/, ''));
  });
  const prefix = e.str('prefix', GATEWAY_DEFAULTS.etcdPrefix, checkPrefix).replace(/\/+$/, '');
  return { endpoints, prefix };
}

function checkPrefix(s: string): string | undefined {
  return s.startsWith('/') && s.replace(/\/+$/, '') !== ''
    ? undefined
    : 'must be a key path starting with / (for example /kvgate/workers)';
}
