/**
 * A reverse proxy between a client and the server that loses chosen answers: the request reaches the server and is
 * answered there, but the client's connection is cut before the answer is passed on, as a network failure after the
 * server acted would. Everything else is relayed unchanged. It counts what it relayed per path.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface DroppingProxy {
  url: string;
  /** Requests received per path, re-sends included. */
  seen: Map<string, number>;
  /** Answers lost, as `path#n` (the n-th request to that path, from 1). */
  dropped: string[];
  close(): Promise<void>;
}

/** `drop`: for each path, which of its requests (1 = the first) lose their answer. */
export async function startDroppingProxy(target: string, drop: Record<string, number[]>): Promise<DroppingProxy> {
  const upstream = new URL(target);
  const seen = new Map<string, number>();
  const dropped: string[] = [];
  const server = http.createServer((request, response) => {
    const path = (request.url ?? '/').split('?')[0];
    const count = (seen.get(path) ?? 0) + 1;
    seen.set(path, count);
    const lose = drop[path]?.includes(count) ?? false;
    const forward = http.request(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: request.method,
        path: request.url,
        headers: { ...request.headers, host: upstream.host },
      },
      (answer) => {
        if (!lose) {
          response.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(response);
          return;
        }
        // Read the whole answer first, so the server has finished with the request, then lose it.
        answer.resume();
        answer.on('end', () => {
          dropped.push(`${path}#${count}`);
          request.socket.destroy();
        });
      },
    );
    forward.on('error', () => request.socket.destroy());
    request.pipe(forward);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    dropped,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
