/** Liveness and the system check: database, engine and queue, each timed, each failing on its own. */
import { type Kysely, sql } from 'kysely';
import type { Database } from '../store/schema.ts';

export interface ProbeResult {
  success: boolean;
  duration_ms: number;
  error?: string;
  /** What the probe reports beside success (the engines: their roles, state and limits). */
  [detail: string]: unknown;
}

/** Anything the system check can ask whether it works (the engine supervisors, the job queue); it may answer details to show. */
export type Probe = () => Promise<void | Record<string, unknown>>;

const PROBE_TIMEOUT_MS = 3000;

async function timed(probe: Probe): Promise<ProbeResult> {
  const started = performance.now();
  let timer: NodeJS.Timeout | undefined;
  try {
    const details = await Promise.race([
      probe(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${PROBE_TIMEOUT_MS} ms`)), PROBE_TIMEOUT_MS);
      }),
    ]);
    return { ...details, success: true, duration_ms: Math.round((performance.now() - started) * 100) / 100 };
  } catch (error) {
    return {
      success: false,
      duration_ms: Math.round((performance.now() - started) * 100) / 100,
      error: (error as Error).message,
    };
  } finally {
    clearTimeout(timer);
  }
}

export class HealthService {
  constructor(
    private readonly db: Kysely<Database>,
    private readonly probes: { engine: Probe; queue: Probe },
  ) {}

  async systemCheck(): Promise<{ ok: boolean; report: Record<'api' | 'database' | 'engine' | 'queue', ProbeResult> }> {
    const [database, engine, queue] = await Promise.all([
      timed(async () => {
        await sql`select 1`.execute(this.db);
      }),
      timed(this.probes.engine),
      timed(this.probes.queue),
    ]);
    const report = { api: { success: true, duration_ms: 0 }, database, engine, queue };
    return { ok: Object.values(report).every((probe) => probe.success), report };
  }
}
