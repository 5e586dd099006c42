/**
 * The Kubernetes manifests under deploy/kubernetes, checked without a cluster
 * (none can run here):
 * - the InferencePool against the `openAPIV3Schema` of GIE's CRD
 *   (vendor/kubernetes, inference.networking.k8s.io/v1), with ajv;
 * - the core and RBAC objects against the fields they use, as the Kubernetes
 *   API reference defines them (a validator written here for those fields:
 *   known apiVersion/kind pairs, selectors matching the pod template's labels,
 *   named ports that exist, probes on declared ports, RBAC rules naming the
 *   resources kvgate reads with the verbs it uses);
 * - the kvgate config each ConfigMap holds, loaded as `kvgate serve` /
 *   `kvgate picker` load it.
 */
import { readFileSync } from 'node:fs';
import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments, parse } from 'yaml';
import { loadGatewayConfig } from '../../src/config/index.js';
import { ROOT } from '../helpers/process.js';

type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const docs = (file: string): Obj[] =>
  parseAllDocuments(readFileSync(`${ROOT}/deploy/kubernetes/${file}`, 'utf8')).map((d) => d.toJS() as Obj);

/** apiVersion of each kind the manifests use (Kubernetes API reference, and the Prometheus Operator's CRD). */
const KINDS: Record<string, string> = {
  ServiceAccount: 'v1',
  ConfigMap: 'v1',
  Service: 'v1',
  Role: 'rbac.authorization.k8s.io/v1',
  RoleBinding: 'rbac.authorization.k8s.io/v1',
  Deployment: 'apps/v1',
  PodDisruptionBudget: 'policy/v1',
  ServiceMonitor: 'monitoring.coreos.com/v1',
  InferencePool: 'inference.networking.k8s.io/v1',
};

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const matches = (selector: Obj, labels: Obj): boolean => Object.entries(selector).every(([k, v]) => labels[k] === v);

/**
 * The kvgate config a ConfigMap holds, loaded as the CLI loads it; the tokenizer the manifests mount at
 * /models/my-model (the operator's volume) is the demo tokenizer here.
 */
function configOf(objects: Obj[]): ReturnType<typeof loadGatewayConfig> {
  const doc = parse(objects.find((o) => o.kind === 'ConfigMap')!.data['kvgate.yaml'] as string) as Obj;
  expect(doc.models[0].tokenizer).toBe('/models/my-model');
  doc.models[0].tokenizer = 'demo';
  return loadGatewayConfig({ base: doc, env: {} });
}

/** Every problem of one file's objects, as `Kind/name: problem`. */
function problems(objects: Obj[]): string[] {
  const out: string[] = [];
  const byKind = (kind: string): Obj[] => objects.filter((o) => o.kind === kind);
  for (const o of objects) {
    const where = `${o.kind}/${o.metadata?.name}`;
    if (KINDS[o.kind] !== o.apiVersion) out.push(`${where}: apiVersion ${o.apiVersion}`);
    if (!DNS_LABEL.test(o.metadata?.name ?? '')) out.push(`${where}: metadata.name`);
    if (o.metadata?.namespace !== 'llm') out.push(`${where}: metadata.namespace`);
  }
  for (const d of byKind('Deployment')) {
    const where = `Deployment/${d.metadata.name}`;
    const tpl = d.spec.template;
    if (!matches(d.spec.selector.matchLabels, tpl.metadata.labels)) out.push(`${where}: selector vs template labels`);
    const sa = tpl.spec.serviceAccountName;
    if (!byKind('ServiceAccount').some((s) => s.metadata.name === sa)) out.push(`${where}: serviceAccountName`);
    for (const c of tpl.spec.containers as Obj[]) {
      const ports = new Map((c.ports as Obj[]).map((p) => [p.name, p.containerPort]));
      for (const p of c.ports as Obj[])
        if (
          !(Number.isInteger(p.containerPort) && p.containerPort > 0 && p.containerPort < 65536) ||
          p.name.length > 15
        )
          out.push(`${where}: port ${p.name}`);
      for (const probe of [c.readinessProbe, c.livenessProbe] as Obj[]) {
        const port = probe?.httpGet?.port ?? probe?.grpc?.port;
        if (probe === undefined || !(ports.has(port) || [...ports.values()].includes(port)))
          out.push(`${where}: probe port ${port}`);
        if (probe?.grpc !== undefined && !Number.isInteger(probe.grpc.port))
          out.push(`${where}: grpc probe port must be a number`);
      }
      for (const m of c.volumeMounts as Obj[])
        if (!(tpl.spec.volumes as Obj[]).some((v) => v.name === m.name)) out.push(`${where}: volumeMount ${m.name}`);
      for (const v of tpl.spec.volumes as Obj[])
        if (v.configMap !== undefined && !byKind('ConfigMap').some((cm) => cm.metadata.name === v.configMap.name))
          out.push(`${where}: configMap ${v.configMap.name}`);
      for (const s of byKind('Service')) {
        if (!matches(s.spec.selector, tpl.metadata.labels)) out.push(`Service/${s.metadata.name}: selector`);
        for (const p of s.spec.ports as Obj[])
          if (!ports.has(p.targetPort)) out.push(`Service/${s.metadata.name}: targetPort ${p.targetPort}`);
      }
    }
    for (const pdb of byKind('PodDisruptionBudget'))
      if (!matches(pdb.spec.selector.matchLabels, tpl.metadata.labels)) out.push(`PodDisruptionBudget: selector`);
  }
  for (const sm of byKind('ServiceMonitor'))
    for (const e of sm.spec.endpoints as Obj[]) {
      const svc = byKind('Service').find((s) => matches(sm.spec.selector.matchLabels, s.metadata.labels ?? {}));
      if (svc === undefined || !(svc.spec.ports as Obj[]).some((p) => p.name === e.port))
        out.push(`ServiceMonitor: port ${e.port}`);
    }
  for (const b of byKind('RoleBinding')) {
    if (!byKind('Role').some((r) => r.metadata.name === b.roleRef.name)) out.push(`RoleBinding: roleRef`);
    if (b.roleRef.apiGroup !== 'rbac.authorization.k8s.io') out.push(`RoleBinding: roleRef.apiGroup`);
  }
  return out;
}

/** The rules a Role grants: `group/resource` -> verbs. */
const grants = (objects: Obj[]): Record<string, string[]> =>
  Object.fromEntries(
    objects
      .filter((o) => o.kind === 'Role')
      .flatMap((r) =>
        (r.rules as Obj[]).flatMap((rule) =>
          rule.apiGroups.flatMap((g: string) => rule.resources.map((res: string) => [`${g}/${res}`, rule.verbs])),
        ),
      ),
  );

describe('deploy/kubernetes', () => {
  it('gateway.yaml: a Deployment, Service, ConfigMap, RBAC, PodDisruptionBudget and ServiceMonitor that fit together', () => {
    const objects = docs('gateway.yaml');
    expect(objects.map((o) => o.kind).sort()).toEqual([
      'ConfigMap',
      'Deployment',
      'PodDisruptionBudget',
      'Role',
      'RoleBinding',
      'Service',
      'ServiceAccount',
      'ServiceMonitor',
    ]);
    expect(problems(objects)).toEqual([]);
    expect(grants(objects)).toEqual({ 'discovery.k8s.io/endpointslices': ['get', 'list', 'watch'] });
    const config = configOf(objects);
    expect(config.models[0]!.kubernetes).toMatchObject({
      namespace: 'llm',
      service: 'my-model-engines',
      portName: 'http',
    });
  });

  it('picker.yaml: the picker, its RBAC for pods and InferencePools, and an InferencePool valid against its CRD', () => {
    const objects = docs('picker.yaml');
    expect(problems(objects)).toEqual([]);
    expect(grants(objects)).toEqual({
      '/pods': ['get', 'list', 'watch'],
      'inference.networking.k8s.io/inferencepools': ['get', 'list', 'watch'],
    });
    const crd = parse(
      readFileSync(`${ROOT}/vendor/kubernetes/inference.networking.k8s.io_inferencepools.yaml`, 'utf8'),
    ) as Obj;
    const v1 = (crd.spec.versions as Obj[]).find((v) => v.name === 'v1')!;
    // The CRD schema's Kubernetes extensions (x-kubernetes-*) are annotations to ajv.
    const ajv = new Ajv({ strict: false, allErrors: true });
    const validate = ajv.compile(v1.schema.openAPIV3Schema as object);
    const pool = objects.find((o) => o.kind === 'InferencePool')!;
    expect(validate(pool), JSON.stringify(validate.errors)).toBe(true);
    expect(validate({ ...pool, spec: { ...pool.spec, targetPorts: [] } })).toBe(false);
    // The pool's picker is the picker's Service, on its gRPC port.
    const svc = objects.find((o) => o.kind === 'Service')!;
    expect(pool.spec.endpointPickerRef).toEqual({ name: svc.metadata.name, port: { number: 9002 } });
    expect((svc.spec.ports as Obj[]).find((p) => p.name === 'grpc')!.port).toBe(9002);
    const config = configOf(objects);
    expect(config.models[0]!.inferencePool).toMatchObject({ namespace: 'llm', name: pool.metadata.name, fallbacks: 3 });
    expect(config.listen.port).toBe(9002);
  });
});
