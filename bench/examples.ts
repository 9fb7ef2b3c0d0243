/**
 * Every example in examples/ in full, as its README section runs it, on SmolLM2-135M-Instruct against a fresh
 * server: prints each one's wall time and what it shows (held-out reward before -> after for the RL examples, the
 * answers before and after SFT, the agent's tool calls, the exported and imported adapters' answers). Asserts
 * nothing; an example that fails is reported and the others still run.
 * Usage: npx tsx bench/examples.ts [--only 1,2]
 */
import { BUILTIN_BASE_MODEL, SMOLLM2_BASE_MODEL } from '../src/config.ts';
import { CLIENTS, type ExampleClient, type ExampleRun, runExample } from '../test/helpers/examples.ts';
import { startE2eServer } from '../test/helpers/server.ts';

const only = process.argv.includes('--only')
  ? process.argv[process.argv.indexOf('--only') + 1].split(',').map(Number)
  : [1, 2, 3, 4, 5];
const TIMEOUT_MS = 60 * 60_000;

const e2e = await startE2eServer({
  env: {
    BASE_MODELS: `${SMOLLM2_BASE_MODEL.id}=${SMOLLM2_BASE_MODEL.path},${BUILTIN_BASE_MODEL.id}=${BUILTIN_BASE_MODEL.path}`,
  },
});
const results: string[] = [];

async function example(
  number: number,
  client: ExampleClient,
  script: string,
  args: () => string[],
  describe: (run: ExampleRun) => string,
): Promise<ExampleRun | null> {
  if (!only.includes(number)) return null;
  if (client.skip) {
    results.push(`${number}. ${script}: skipped, ${client.skip}`);
    return null;
  }
  console.log(`\n=== ${number}. ${script} ${args().join(' ')}`);
  try {
    const run = await runExample(client.python!, script, args(), e2e, TIMEOUT_MS);
    console.log(run.output);
    results.push(`${number}. ${script}: ${run.seconds.toFixed(0)} s; ${describe(run)}`);
    return run;
  } catch (error) {
    results.push(`${number}. ${script}: FAILED ${(error as Error).message.split('\n')[0]}`);
    console.log((error as Error).message);
    return null;
  }
}

const reward = (run: ExampleRun) =>
  `reward ${run.summary.reward_before.toFixed(2)} -> ${run.summary.reward_after.toFixed(2)}`;
try {
  const rl = await example(
    1,
    CLIENTS.art,
    'rl_capitals_art.py',
    () => [],
    (run) =>
      `held-out ${reward(run)} (train reward per step ${run.summary.train_rewards.map((r: number) => r.toFixed(2)).join(' ')})`,
  );
  const sft = await example(
    2,
    CLIENTS.art,
    'sft_fact_art.py',
    () => [],
    (run) =>
      `${JSON.stringify(run.summary.question)}: before ${JSON.stringify(run.summary.before)}, after ${JSON.stringify(run.summary.after)}`,
  );
  const checkpoint = (run: ExampleRun | null) => (run ? [`${run.summary.model}:step${run.summary.step}`] : []);
  await example(
    3,
    CLIENTS.art,
    'tool_agent_openai.py',
    () => ['--model', ...(checkpoint(rl).length ? checkpoint(rl) : [SMOLLM2_BASE_MODEL.id])],
    (run) =>
      run.summary.turns
        .map(
          (turn: any) =>
            `${turn.tool_calls.map((call: any) => `${call.name}(${call.arguments})=${call.result}`).join(', ')} -> ${JSON.stringify(turn.answer)}`,
        )
        .join(' | '),
  );
  await example(
    4,
    CLIENTS.tinker,
    'tinker_cookbook_rl.py',
    () => ['--run-dir', `${e2e.dataDir}/cookbook`],
    (run) => `batch ${reward(run)} (per batch ${run.summary.rewards.map((r: number) => r.toFixed(2)).join(' ')})`,
  );
  await example(
    5,
    CLIENTS.peft,
    'peft_export_import.py',
    () => checkpoint(sft).flatMap((name) => ['--model', name]),
    (run) =>
      `${run.summary.export ? `export: transformers ${JSON.stringify(run.summary.export.transformers_answer)}, server ${JSON.stringify(run.summary.export.server_answer)}; ` : ''}import: ${JSON.stringify(run.summary.import.answer)}`,
  );
} finally {
  await e2e.close();
}
console.log(`\nexamples on ${SMOLLM2_BASE_MODEL.id}:\n${results.join('\n')}`);
