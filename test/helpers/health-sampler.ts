/**
 * /v1/health latencies sampled from a thread of the test's own, so neither the server's event loop (a child
 * process) nor the test's own work (building a 50 MB body) delays the clock: a poll every `intervalMs`, each
 * timed from its start to its answer.
 */
import os from 'node:os';
import { Worker } from 'node:worker_threads';

const SAMPLER = `
const { parentPort, workerData } = require('node:worker_threads');
const http = require('node:http');
const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
const latencies = [];
let stopped = false;
parentPort.on('message', () => { stopped = true; });
const poll = () => new Promise((resolve) => {
  const started = performance.now();
  const request = http.get(workerData.url + '/v1/health', { agent, timeout: 30000 }, (response) => {
    response.resume();
    response.on('end', () => resolve(performance.now() - started));
  });
  request.on('timeout', () => { request.destroy(); resolve(performance.now() - started); });
  request.on('error', () => resolve(performance.now() - started));
});
(async () => {
  while (!stopped) {
    latencies.push(await poll());
    await new Promise((resolve) => setTimeout(resolve, workerData.intervalMs));
  }
  agent.destroy();
  parentPort.postMessage(latencies);
})();
`;

export interface HealthFigures {
  polls: number;
  p50: number;
  p99: number;
  max: number;
}

export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))] ?? 0;
}

/** Starts sampling; `stop()` answers the figures of every poll made meanwhile. */
export function sampleHealth(url: string, intervalMs = 20): { stop(): Promise<HealthFigures> } {
  const worker = new Worker(SAMPLER, { eval: true, workerData: { url, intervalMs } });
  const latencies = new Promise<number[]>((resolve) => worker.once('message', resolve));
  return {
    async stop() {
      worker.postMessage('stop');
      const all = await latencies;
      await worker.terminate();
      return {
        polls: all.length,
        p50: percentile(all, 50),
        p99: percentile(all, 99),
        max: all.reduce((a, b) => Math.max(a, b), 0),
      };
    },
  };
}

/** The 1-minute load average and the core count, for figures that depend on them. */
export function machineLoad(): string {
  return `load average ${os.loadavg()[0].toFixed(1)} on ${os.cpus().length} cores`;
}
