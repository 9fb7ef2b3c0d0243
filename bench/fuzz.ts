/**
 * The long fuzz run (the test suite runs a bounded one): FUZZ_REQUESTS (default 10,000) seeded hostile
 * requests against a fresh server, on SQLite, or on PostgreSQL when DATABASE_URL names a database to use.
 * Prints the status histogram per route, every finding, health figures and cross-entity changes; exits 1
 * on any failure. Usage: FUZZ_SEED=7 FUZZ_REQUESTS=10000 npx tsx bench/fuzz.ts
 */
import { formatReport, runFuzz } from '../test/fuzz/run.ts';

const report = await runFuzz({
  seed: Number(process.env.FUZZ_SEED ?? 21),
  requests: Number(process.env.FUZZ_REQUESTS ?? 10_000),
  concurrency: Number(process.env.FUZZ_CONCURRENCY ?? 4),
  databaseUrl: process.env.DATABASE_URL ?? null,
  progress: (line) => console.log(line),
});
console.log(formatReport(report));
const failed =
  report.crashed !== null ||
  report.wedged ||
  report.findings.length > 0 ||
  report.health.slow + report.health.failures > 0 ||
  report.crossEntityChanges.length > 0;
process.exit(failed ? 1 : 0);
