/**
 * The command line: `serve` runs the service; `keys create|list|revoke` and `teams add-member` manage access.
 * Run as `npm run cli -- <command>`.
 */
import { parseArgs } from 'node:util';
import { loadConfig, ConfigError, type Config } from './config.ts';
import { openStore, migrate } from './store/db.ts';
import { createServices, type Services } from './context.ts';
import { startServer } from './server.ts';
import { systemClock } from './clock.ts';

const USAGE = `usage: npm run cli -- <command>
  serve                                  start the HTTP service
  keys create --entity NAME              create an API key (prints the key alone on the last line)
  keys list                              list keys (prefixes only)
  keys revoke ID|KEY                     revoke a key
  teams add-member --team TEAM --entity NAME   let NAME's keys act for TEAM`;

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
  const lines = [`Service listening on ${server.url}  (OpenAI base URL: ${server.url}/v1)`];
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
    options: { entity: { type: 'string' }, team: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
  });
  const [command, subcommand, argument] = positionals;
  if (values.help || !command) {
    console.log(USAGE);
    return;
  }
  const config = loadConfig();
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
