/**
 * A protocol double of etcd's gRPC API (etcd3's own rpc.proto, served by grpc-js on loopback) for the one
 * misbehaviour a real etcd cannot be made to show: it answers a range with an empty prefix, and confirms each
 * watch (`created`) then ends the watch stream at once, with no event. `ranges` and `watches` count the calls.
 */
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';

interface ServiceDef {
  service: grpc.ServiceDefinition;
}

export class EtcdWatchDouble {
  readonly #server: grpc.Server;
  readonly #port: number;
  ranges = 0;
  watches = 0;

  private constructor(server: grpc.Server, port: number) {
    this.#server = server;
    this.#port = port;
  }

  static async start(): Promise<EtcdWatchDouble> {
    const etcd3 = dirname(createRequire(import.meta.url).resolve('etcd3/package.json'));
    const pkg = grpc.loadPackageDefinition(
      loadSync(join(etcd3, 'proto/rpc.proto'), { keepCase: true, longs: String, enums: String, defaults: true }),
    ) as unknown as { etcdserverpb: { KV: ServiceDef; Watch: ServiceDef } };
    const server = new grpc.Server();
    let double: EtcdWatchDouble | undefined;
    const header = { cluster_id: '1', member_id: '1', revision: '5', raft_term: '1' };
    server.addService(pkg.etcdserverpb.KV.service, {
      Range: (_call: unknown, done: grpc.sendUnaryData<unknown>) => {
        double!.ranges++;
        done(null, { header, kvs: [], more: false, count: '0' });
      },
    });
    let nextId = 1;
    server.addService(pkg.etcdserverpb.Watch.service, {
      Watch: (call: grpc.ServerDuplexStream<{ create_request?: unknown }, unknown>) => {
        call.on('data', (req: { create_request?: unknown }) => {
          if (req.create_request === undefined || req.create_request === null) return;
          double!.watches++;
          call.write({ header, watch_id: String(nextId++), created: true });
          call.end();
        });
        call.on('error', () => undefined);
      },
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) =>
        err === null ? resolve(p) : reject(err),
      ),
    );
    double = new EtcdWatchDouble(server, port);
    return double;
  }

  get url(): string {
    return `http://127.0.0.1:${this.#port}`;
  }

  close(): void {
    this.#server.forceShutdown();
  }
}
