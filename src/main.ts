/**
 * The command line: `serve` runs the service; `keys create|list|revoke` and `teams add-member` manage access.
 * Run as `npm run cli -- <command>`.
 */
import { parseArgs } from 'node:util';
import { loadConfig, ConfigError, type Config } from './config.ts';
import { openStore, migrate } from './store/db.ts';
import { createServices, type Services } from './context.ts';
import { startServer } from './server.ts';
import { resolveModelId, serviceClient } from './cli/client.ts';
import { uploadFiles } from './cli/upload.ts';
import { runSft } from './cli/sft.ts';
import { downloadAdapter } from './cli/download.ts';
import { checkSftData, describeProblems } from './cli/sft-check.ts';
import { systemClock } from './clock.ts';

const USAGE = `usage: npm run cli -- <command>
  serve                                  start the HTTP service
  keys create --entity NAME              create an API key (prints the key alone on the last line)
  keys list                              list keys (prefixes only)
  keys revoke ID|KEY                     revoke a key
  teams add-member --team TEAM --entity NAME   let NAME's keys act for TEAM
  upload PATH... --project P --name N [--entity E]   upload files or folders as a new artifact version
                                         (prints its wandb-artifact:/// URL on the last line)
  sft --model-id ID PATH... [--batch-size N] [--learning-rate X] [--dry-run]
                                         check every line of the SFT data here, then upload it, start a job
                                         and follow it to its end (--dry-run: only the check)
  checkpoints download --model-id ID --step N [--output FILE]
                                         save a checkpoint as a PEFT adapter archive (tar)
  (--model-id takes an id, entity/project/name or project/name)
  (upload, sft and checkpoints talk to a running server: --url or AGENT_TRAINER_URL, --key or API_KEY, else the local bootstrap key)`;

async function dryRunSft(inputs: string[]): Promise<void> {
  if (inputs.length === 0) throw new Error('sft --dry-run needs one or more files or folders');
  const check = await checkSftData(inputs);
  for (const { file, conversations } of check.files) console.log(`${file}: ${conversations} conversations`);
  if (check.problems.length) throw new Error(describeProblems(check));
  console.log('the SFT data is valid; nothing was uploaded (--dry-run)');
}

async function downloadCommand(config: Config, values: { 'model-id'?: string; step?: string; output?: string; url?: string; key?: string }): Promise<void> {
  if (!values['model-id'] || !/^\d+$/.test(values.step ?? '')) throw new Error('checkpoints download needs --model-id ID and --step N');
  const client = serviceClient(config, values);
  console.log(await downloadAdapter(client, await resolveModelId(client, values['model-id']), Number(values.step), values.output));
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

async function serve(config: Config): Promise<void> {
  const server = await startServer(config);
  const lines = [`Service listening on ${server.url}  (OpenAI base URL: ${server.url}/v1, dashboard: ${server.url}/)`];
  if (server.bootstrapKey) lines.push(`Bootstrap API key for entity "local" (shown once): ${server.bootstrapKey}`);
  lines.push(`API key file: ${config.dataDir}/bootstrap-api-key  (more keys: npm run cli -- keys create --entity NAME)`);
  console.log(`\n${lines.join('\n')}\n`);

  const shutdown = async () => {
    await server.close();
    process.exit(0);
  };
  process.once('SIGINT', () => void shutdown());
  process.once('SIGTERM', () => void shutdown());
}

async function main(argv: string[]): Promise<void> {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      entity: { type: 'string' },
      team: { type: 'string' },
      project: { type: 'string' },
      name: { type: 'string' },
      'model-id': { type: 'string' },
      'batch-size': { type: 'string' },
      'learning-rate': { type: 'string' },
      step: { type: 'string' },
      'dry-run': { type: 'boolean' },
      output: { type: 'string', short: 'o' },
      url: { type: 'string' },
      key: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const [command, subcommand, argument] = positionals;
  if (values.help || !command) {
    console.log(USAGE);
    return;
  }
  const config = loadConfig();
  if (command === 'upload') {
    if (!values.project || !values.name) throw new Error('upload needs --project P --name N and one or more files or folders');
    const client = serviceClient(config, values);
    const entity = values.entity ?? (await client.json<{ entity: string }>('GET', '/v1/preview/me')).entity;
    const artifact = await uploadFiles(client, { entity, project: values.project, name: values.name }, positionals.slice(1));
    for (const file of artifact.files) console.log(`${file.name}  ${file.size} bytes  sha256 ${file.sha256}`);
    console.log(artifact.url);
    return;
  }
  if (command === 'sft' && values['dry-run']) return dryRunSft(positionals.slice(1));
  if (command === 'sft') {
    const modelId = values['model-id'];
    if (!modelId || positionals.length < 2) throw new Error('sft needs --model-id ID and one or more files or folders');
    const outcome = await runSft(serviceClient(config, values), {
      modelId,
      inputs: positionals.slice(1),
      batchSize: values['batch-size'] ? Number(values['batch-size']) : undefined,
      learningRate: values['learning-rate'] ? Number(values['learning-rate']) : undefined,
    });
    console.log(`${outcome.ok ? 'SFT job finished' : 'SFT job failed'} (${outcome.jobId}, data ${outcome.url}): ${outcome.message}`);
    if (!outcome.ok) process.exitCode = 1;
    return;
  }
  if (command === 'checkpoints' && subcommand === 'download') return downloadCommand(config, values);
  const command2 = subcommand ? `${command} ${subcommand}` : command;
  switch (command2) {
    case 'serve':
      return serve(config);
    case 'keys create': {
      if (!values.entity) throw new Error('keys create needs --entity NAME');
      const entity = values.entity;
      const created = await withServices(config, (services) => services.auth.createKey(entity));
      console.log(`Created key ${created.id} for entity ${entity}. It is shown once:`);
      console.log(created.key);
      return;
    }
    case 'keys list': {
      const keys = await withServices(config, (services) => services.auth.listKeys());
      for (const key of keys) {
        console.log(`${key.id}  ${key.entityName.padEnd(20)} ${key.keyPrefix}…  created ${key.createdAt}${key.revokedAt ? `  REVOKED ${key.revokedAt}` : ''}`);
      }
      return;
    }
    case 'keys revoke': {
      if (!argument) throw new Error('keys revoke needs a key id or the key');
      const revoked = await withServices(config, (services) => services.auth.revokeKey(argument));
      if (!revoked) throw new Error(`no live key matches ${argument}`);
      console.log('Revoked.');
      return;
    }
    case 'teams add-member': {
      if (!values.team || !values.entity) throw new Error('teams add-member needs --team TEAM --entity NAME');
      const { team, entity } = values as { team: string; entity: string };
      await withServices(config, (services) => services.auth.addMembership(team, entity));
      console.log(`Keys of ${entity} may now act for ${team}.`);
      return;
    }
    default:
      throw new Error(`unknown command: ${command2}\n${USAGE}`);
  }
}

main(process.argv.slice(2)).catch((error: unknown) => {
  console.error(error instanceof ConfigError ? error.message : `error: ${(error as Error).message}`);
  process.exit(1);
});
