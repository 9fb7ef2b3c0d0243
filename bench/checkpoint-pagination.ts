/**
 * Checkpoint pagination must cost the same with 10 or 100 000 checkpoints (index seek, no offset scan).
 * Prints the median latency of a cursor page deep inside each model, through the HTTP stack, and their ratio.
 * Usage: npx tsx bench/checkpoint-pagination.ts   (TEST_DATABASE_URL=postgres://… adds a PostgreSQL run)
 */
import { newId } from '../src/ids.ts';
import { startTestApp, type TestApp } from '../test/helpers/app.ts';
import { backends } from '../test/helpers/database.ts';

const LARGE = 100_000;
const SAMPLES = 200;

async function modelWithCheckpoints(
  t: TestApp,
  name: string,
  count: number,
): Promise<{ id: string; cursors: string[] }> {
  const model = (await t.call('POST', '/v1/preview/models', { project: 'bench', name, base_model: 'test/base' })).body;
  const rows = Array.from({ length: count }, (_, index) => ({
    id: newId(),
    model_id: model.id,
    step: index + 1,
    metrics: JSON.stringify({ 'train/reward': Math.random() }),
    adapter_path: null,
    created_at: new Date().toISOString(),
  }));
  for (let start = 0; start < rows.length; start += 1000) {
    await t.store.db
      .insertInto('checkpoints')
      .values(rows.slice(start, start + 1000))
      .execute();
  }
  // Cursors spread over the whole model, so deep pages are measured as often as shallow ones.
  const cursors = Array.from(
    { length: SAMPLES },
    (_, i) => rows[Math.floor(((i + 0.5) / SAMPLES) * (rows.length - 1))].id,
  );
  return { id: model.id, cursors };
}

async function medianPageMs(t: TestApp, model: { id: string; cursors: string[] }): Promise<number> {
  const timings: number[] = [];
  for (const order of ['asc', 'desc']) {
    for (const cursor of model.cursors) {
      const started = performance.now();
      const response = await t.call(
        'GET',
        `/v1/preview/models/${model.id}/checkpoints?limit=20&order=${order}&after=${cursor}`,
      );
      timings.push(performance.now() - started);
      if (response.status !== 200) throw new Error(`page failed: ${response.status}`);
    }
  }
  timings.sort((a, b) => a - b);
  return timings[Math.floor(timings.length / 2)];
}

for (const backend of backends()) {
  const t = await startTestApp(backend);
  try {
    const small = await modelWithCheckpoints(t, 'small', 10);
    const large = await modelWithCheckpoints(t, 'large', LARGE);
    await medianPageMs(t, small); // warm-up
    const smallMs = await medianPageMs(t, small);
    const largeMs = await medianPageMs(t, large);
    console.log(
      `${backend.name.padEnd(8)} page of 20 after a cursor: 10 checkpoints ${smallMs.toFixed(3)} ms, ${LARGE} checkpoints ${largeMs.toFixed(3)} ms, ratio ${(largeMs / smallMs).toFixed(2)}`,
    );
  } finally {
    await t.close();
  }
}
