/**
 * The command line (commander: `--help` on every command): `serve` runs the service; `keys` and `teams` manage
 * access in the local database; `upload`, `sft` and `checkpoints download` talk to a running server.
 * Run as `npm run cli -- <command>`.
 */
import { Command } from 'commander';
import { resolveModelId, serviceClient } from './cli/client.ts';
import { downloadAdapter } from './cli/download.ts';
import { runSft } from './cli/sft.ts';
import { checkSftData, describeProblems } from './cli/sft-check.ts';
import { uploadFiles } from './cli/upload.ts';
import { systemClock } from './clock.ts';
import { type Config, ConfigError, loadConfig, SERVE_FLAGS, withServeFlags } from './config.ts';
import { createServices, type Services } from './context.ts';
import { startServer } from './server.ts';
import { migrate, openStore } from './store/db.ts';

async function dryRunSft(inputs: string[]): Promise<void> {
  if (inputs.length === 0) throw new Error('sft --dry-run needs one or more files or folders');
  const check = await checkSftData(inputs);
  for (const { file, conversations } of check.files) console.log(`${file}: ${conversations} conversations`);
  if (check.problems.length) throw new Error(describeProblems(check));
  console.log('the SFT data is valid; nothing was uploaded (--dry-run)');
}

/** Runs one administrative action against the migrated database, then closes it. */
async function withServices<T>(config: Config, work: (services: Services) => Promise<T>): Promise<T> {
  const store = openStore(config);
  try {
    await migrate(store);
    return await work(createServices({ config, store, clock: systemClock }));
  } finally {
    await store.close();
  }
}

/**
 * Runs one start-up step and prints its name with its time (or that it failed) as one line when it ends: the
 * server's own log lines arrive meanwhile, and a line begun before them would be cut in two.
 */
async function step<T>(label: string, work: () => Promise<T>, detail: (result: T) => string = () => ''): Promise<T> {
  const started = performance.now();
  const seconds = () => `${((performance.now() - started) / 1000).toFixed(1)} s`;
  try {
    const result = await work();
    const extra = detail(result);
    console.log(`${label} … ${seconds()}${extra ? `  (${extra})` : ''}`);
    return result;
  } catch (error) {
    console.log(`${label} … failed after ${seconds()}`);
    throw error;
  }
}

/**
 * Serves, showing each start-up step with its time: the database and listener, the engine process (torch's import
 * and its matmul measurement), then the default base model, so that the first chat does not pay for loading it.
 */
async function serve(config: Config): Promise<void> {
  const server = await step('opening the database, starting the engine and the HTTP listener', () =>
    startServer(config),
  );
  const shutdown = async () => {
    await server.close();
    process.exit(0);
  };
  process.once('SIGINT', () => void shutdown());
  process.once('SIGTERM', () => void shutdown());
  if (config.engineEnabled) {
    const engine = () => server.supervisor?.health().engine;
    // Neither is fatal: the service serves everything else meanwhile (the supervisor keeps restarting an engine that
    // exits), and a request that needs the engine or this model reports the problem itself.
    const ready = await step(
      'waiting for the engine (Python, torch, a matmul measurement)',
      () => server.waitForEngines(),
      () => {
        const ready = engine();
        return ready
          ? `torch ${ready.torch} on ${ready.device}, fp32 matmul ${ready.matmul_gflops} GFLOP/s`
          : 'no engine of ours runs in this process';
      },
    ).then(
      () => true,
      (error: Error) => {
        console.log(`  ${error.message}`);
        return false;
      },
    );
    if (ready)
      await step(
        `loading the default base model ${config.defaultBaseModel}`,
        () => server.services.runtime.load(config.defaultBaseModel),
        (base) => base.path,
      ).catch((error: Error) => console.log(`  ${error.message}`));
  }

  const lines = [`Service listening on ${server.url}  (OpenAI base URL: ${server.url}/v1, dashboard: ${server.url}/)`];
  if (server.bootstrapKey) lines.push(`Bootstrap API key for entity "local" (shown once): ${server.bootstrapKey}`);
  lines.push(
    `API key file: ${config.dataDir}/bootstrap-api-key  (more keys: npm run cli -- keys create --entity NAME)`,
  );
  console.log(`\n${lines.join('\n')}\n`);
}

/** Commander's camelCased option values back under their flag names (`maxModelLen` → `max-model-len`). */
function serveFlagsOf(options: Record<string, string | undefined>): Partial<Record<keyof typeof SERVE_FLAGS, string>> {
  const camel = (flag: string) => flag.replace(/-([a-z])/g, (_, letter: string) => letter.toUpperCase());
  return Object.fromEntries(Object.keys(SERVE_FLAGS).map((flag) => [flag, options[camel(flag)]]));
}

/** Adds the options of commands that talk to a running server. */
function remote(command: Command): Command {
  return command
    .option('--url <url>', "the server (default: AGENT_TRAINER_URL, else this machine's HOST and PORT)")
    .option('--key <key>', 'an API key (default: API_KEY, else the local bootstrap key)');
}

type Remote = { url?: string; key?: string };

function program(): Command {
  const cli = new Command('npm run cli --')
    .description('agent-trainer: serve, manage keys, upload data, train and take checkpoints away')
    .showHelpAfterError();
  const serveCommand = cli
    .command('serve')
    .description('start the HTTP service; each flag overrides its environment variable');
  for (const [flag, variable] of Object.entries(SERVE_FLAGS))
    serveCommand.option(`--${flag} <value>`, `overrides ${variable}`);
  serveCommand.action((options: Record<string, string | undefined>) =>
    serve(loadConfig(withServeFlags(process.env, serveFlagsOf(options)))),
  );
  const keys = cli.command('keys').description('API keys');
  keys
    .command('create')
    .description('create an API key (prints the key alone on the last line)')
    .requiredOption('--entity <name>', 'the entity the key acts as')
    .action(async ({ entity }: { entity: string }) => {
      const created = await withServices(loadConfig(), (services) => services.auth.createKey(entity));
      console.log(`Created key ${created.id} for entity ${entity}. It is shown once:`);
      console.log(created.key);
    });
  keys
    .command('list')
    .description('list keys (prefixes only)')
    .action(async () => {
      for (const key of await withServices(loadConfig(), (services) => services.auth.listKeys())) {
        console.log(
          `${key.id}  ${key.entityName.padEnd(20)} ${key.keyPrefix}…  created ${key.createdAt}${key.revokedAt ? `  REVOKED ${key.revokedAt}` : ''}`,
        );
      }
    });
  keys
    .command('revoke')
    .description('revoke a key')
    .argument('<id-or-key>', 'the key id or the key itself')
    .action(async (argument: string) => {
      if (!(await withServices(loadConfig(), (services) => services.auth.revokeKey(argument))))
        throw new Error(`no live key matches ${argument}`);
      console.log('Revoked.');
    });
  cli
    .command('teams')
    .description('teams')
    .command('add-member')
    .description("let an entity's keys act for a team")
    .requiredOption('--team <team>')
    .requiredOption('--entity <name>')
    .action(async ({ team, entity }: { team: string; entity: string }) => {
      await withServices(loadConfig(), (services) => services.auth.addMembership(team, entity));
      console.log(`Keys of ${entity} may now act for ${team}.`);
    });
  addDataCommands(cli);
  return cli;
}

/** upload, sft and checkpoints download: the commands that talk to a running server. */
function addDataCommands(cli: Command): void {
  remote(
    cli
      .command('upload')
      .description('upload files or folders as a new artifact version (prints its wandb-artifact:/// URL last)'),
  )
    .argument('<paths...>')
    .requiredOption('--project <project>')
    .requiredOption('--name <name>')
    .option('--entity <entity>', "default: the key's own entity")
    .action(async (paths: string[], options: Remote & { project: string; name: string; entity?: string }) => {
      const client = serviceClient(loadConfig(), options);
      const entity = options.entity ?? (await client.json<{ entity: string }>('GET', '/v1/preview/me')).entity;
      const artifact = await uploadFiles(client, { entity, project: options.project, name: options.name }, paths);
      for (const file of artifact.files) console.log(`${file.name}  ${file.size} bytes  sha256 ${file.sha256}`);
      console.log(artifact.url);
    });
  remote(
    cli
      .command('sft')
      .description('check every line of the SFT data here, upload it, start a job and follow it to its end'),
  )
    .argument('<paths...>', '.jsonl files, or folders with train.jsonl')
    .option('--model-id <model>', 'an id, entity/project/name or project/name (not needed with --dry-run)')
    .option('--batch-size <n>', 'sequences per step', Number)
    .option('--learning-rate <x>', 'learning rate', Number)
    .option('--dry-run', 'only check the data; upload nothing')
    .action(
      async (
        paths: string[],
        options: Remote & { modelId?: string; batchSize?: number; learningRate?: number; dryRun?: boolean },
      ) => {
        if (options.dryRun) return dryRunSft(paths);
        if (!options.modelId) throw new Error('sft needs --model-id (or --dry-run)');
        const outcome = await runSft(serviceClient(loadConfig(), options), {
          modelId: options.modelId,
          inputs: paths,
          batchSize: options.batchSize,
          learningRate: options.learningRate,
        });
        console.log(
          `${outcome.ok ? 'SFT job finished' : 'SFT job failed'} (${outcome.jobId}, data ${outcome.url}): ${outcome.message}`,
        );
        if (!outcome.ok) process.exitCode = 1;
      },
    );
  remote(
    cli
      .command('checkpoints')
      .description('checkpoints')
      .command('download')
      .description('save a checkpoint as a PEFT adapter archive (tar); prints the file name'),
  )
    .requiredOption('--model-id <model>', 'an id, entity/project/name or project/name')
    .requiredOption('--step <n>', 'the checkpoint step')
    .option('-o, --output <file>', 'default: the name the server suggests, in this folder')
    .action(async (options: Remote & { modelId: string; step: string; output?: string }) => {
      if (!/^\d+$/.test(options.step)) throw new Error(`--step ${options.step}: expected a step number`);
      const client = serviceClient(loadConfig(), options);
      console.log(
        await downloadAdapter(
          client,
          await resolveModelId(client, options.modelId),
          Number(options.step),
          options.output,
        ),
      );
    });
}

program()
  .parseAsync(process.argv)
  .catch((error: unknown) => {
    console.error(error instanceof ConfigError ? error.message : `error: ${(error as Error).message}`);
    process.exit(1);
  });
