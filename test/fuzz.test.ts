/**
 * The fuzz suite in its bounded form: seeded hostile requests over every route, two entities, the real server
 * (its own process) and engine, on SQLite and (when TEST_DATABASE_URL is set) PostgreSQL. No 5xx, no hung
 * request, no crash, /v1/health always within 1 s, and the second entity's data exactly as it was.
 * FUZZ_SEED and FUZZ_REQUESTS override the defaults; `npx tsx bench/fuzz.ts` is the long run.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ENDPOINTS } from './fuzz/endpoints.ts';
import { formatReport, runFuzz } from './fuzz/run.ts';
import { registeredRoutes } from './helpers/app.ts';
import { backends } from './helpers/database.ts';

const SEED = Number(process.env.FUZZ_SEED ?? 21);
const REQUESTS = Number(process.env.FUZZ_REQUESTS ?? 1000);

const isParam = (segment: string) => segment.startsWith(':') || segment === '*';

/**
 * Whether a fuzzer entry (`METHOD /template`) reaches a registered route (`METHOD /path`): segment by segment, a
 * template parameter stands for any segment (the fuzzer picks files and names there), a literal must be equal.
 */
function covers(entry: string, route: string): boolean {
  const [entryMethod, template] = entry.split(' ');
  const [routeMethod, path] = route.split(' ');
  const wanted = template.split('/');
  const actual = path.split('/');
  return (
    entryMethod === routeMethod &&
    wanted.length === actual.length &&
    actual.every((segment, i) => isParam(wanted[i]) || (!isParam(segment) && segment === wanted[i]))
  );
}

test('the fuzzer’s route table reaches every route the app registers, and only those', async () => {
  const routes = await registeredRoutes();
  const entries = ENDPOINTS.map((endpoint) => `${endpoint.method} ${endpoint.template}`);
  assert.ok(routes.length > 40, `only ${routes.length} routes seen: ${routes.join(', ')}`);
  const missing = routes.filter((route) => !entries.some((entry) => covers(entry, route)));
  assert.deepEqual(
    missing,
    [],
    `routes the fuzzer never sends to (add them to test/fuzz/endpoints.ts): ${missing.join(', ')}`,
  );
  const stale = entries.filter((entry) => !routes.some((route) => covers(entry, route)));
  assert.deepEqual(stale, [], `fuzzer entries no route answers: ${stale.join(', ')}`);
});

for (const backend of backends()) {
  describe(`fuzz on ${backend.name}`, () => {
    test(`${REQUESTS} hostile requests (seed ${SEED}): no 5xx, no crash, health within 1 s, no cross-entity change`, {
      timeout: 900_000,
    }, async () => {
      const database = await backend.create();
      try {
        const report = await runFuzz({
          seed: SEED,
          requests: REQUESTS,
          databaseUrl: database.databaseUrl,
          progress: (line) => console.log(line),
        });
        console.log(formatReport(report));
        assert.equal(report.crashed, null, 'the server process crashed');
        assert.equal(report.wedged, false, 'the server stopped answering health');
        assert.deepEqual(
          report.findings.map((f) => `#${f.index} ${f.status} ${f.label}`),
          [],
          'no 5xx, timeout or refused connection',
        );
        assert.equal(
          report.health.failures + report.health.slow,
          0,
          `health answered late or not at all (slowest ${report.health.maxMs} ms)`,
        );
        assert.ok(report.health.polls > 0);
        assert.deepEqual(report.crossEntityChanges, [], "the other entity's data changed");
      } finally {
        await database.drop();
      }
    });
  });
}
