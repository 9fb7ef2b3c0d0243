/** src/config.ts: the environment read into a Config, with defaults, and every bad variable named in one error. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ConfigError, loadConfig } from '../../src/config.ts';

describe('configuration', () => {
  test('every bad variable is named in one error', () => {
    assert.throws(
      () => loadConfig({ PORT: 'eighty', LOG_LEVEL: 'loud', DATABASE_URL: 'mysql://x', BOOTSTRAP_API_KEY: 'short' }),
      (error: Error) =>
        ['PORT', 'LOG_LEVEL', 'DATABASE_URL', 'BOOTSTRAP_API_KEY'].every((name) => error.message.includes(name)),
    );
    const config = loadConfig({});
    assert.equal(config.port, 8000);
    assert.equal(config.databaseUrl, null);
    assert.ok(config.dataDir.endsWith('/data'));
  });

  test('base model aliases: SmolLM2 answers to its Hugging Face name; BASE_MODEL_ALIASES adds names, and a bad entry is named', () => {
    const builtIn = loadConfig({}).baseModels.find((model) => model.id === 'builtin/smollm2-135m-instruct');
    assert.deepEqual(builtIn?.aliases, ['HuggingFaceTB/SmolLM2-135M-Instruct']);
    const config = loadConfig({ BASE_MODEL_ALIASES: 'builtin/tiny-chat=Org/Tiny|org/tiny-chat' });
    assert.deepEqual(config.baseModels.find((model) => model.id === 'builtin/tiny-chat')?.aliases, [
      'Org/Tiny',
      'org/tiny-chat',
    ]);
    // The built-in specs are not changed for the next configuration.
    assert.equal(loadConfig({}).baseModels.find((model) => model.id === 'builtin/tiny-chat')?.aliases, undefined);
    for (const [aliases, named] of [
      ['no-such-base=Org/X', /"no-such-base" is not one of BASE_MODELS/],
      ['builtin/tiny-chat=', /expected base-id=name\|name/],
      [
        'builtin/tiny-chat=HuggingFaceTB/SmolLM2-135M-Instruct',
        /names both builtin\/smollm2-135m-instruct and builtin\/tiny-chat/,
      ],
    ] as const)
      assert.throws(
        () => loadConfig({ BASE_MODEL_ALIASES: aliases }),
        (error: Error) => error instanceof ConfigError && named.test(error.message),
        aliases,
      );
  });

  test('timeouts and connection caps: defaults, and a request timeout shorter than the headers one is refused', () => {
    const config = loadConfig({});
    assert.deepEqual(
      [
        config.headersTimeoutMs,
        config.bodyIdleTimeoutMs,
        config.requestTimeoutMs,
        config.keepAliveTimeoutMs,
        config.maxConnections,
        config.maxConnectionsPerClient,
      ],
      [30_000, 60_000, 3_600_000, 72_000, 10_000, 1_000],
    );
    assert.equal(loadConfig({ REQUEST_TIMEOUT_MS: '0' }).requestTimeoutMs, 0);
    assert.throws(
      () => loadConfig({ REQUEST_TIMEOUT_MS: '1000', HEADERS_TIMEOUT_MS: '5000', MAX_CONNECTIONS_PER_CLIENT: '0' }),
      (error: Error) =>
        /REQUEST_TIMEOUT_MS=1000: must be 0 or at least HEADERS_TIMEOUT_MS/.test(error.message) &&
        error.message.includes('MAX_CONNECTIONS_PER_CLIENT'),
    );
  });

  test('every bad engine variable is named in one error', () => {
    const env = {
      ENGINES: 'both',
      SAMPLER_URLS: 'http://gpu:1',
      TRAINER_URL: 'tcp://gpu-a:7000',
      SAMPLERS: '0',
      SAMPLER_DEVICE: 'tpu',
      MAX_NUM_SEQS: '0',
      DTYPE: 'int8',
      KV_CACHE_MEMORY_BYTES: 'lots',
      TRAINER_NICE: '20',
    };
    const error = (() => {
      try {
        loadConfig(env);
      } catch (caught) {
        return caught;
      }
      return assert.fail('expected a ConfigError');
    })();
    assert.ok(error instanceof ConfigError);
    for (const name of [
      'ENGINES=',
      'SAMPLER_URLS:',
      'SAMPLERS=',
      'SAMPLER_DEVICE=',
      'MAX_NUM_SEQS=',
      'DTYPE=',
      'KV_CACHE_MEMORY_BYTES=',
      'TRAINER_NICE=',
      'ENGINE_SECRET:',
    ]) {
      assert.ok(
        error.problems.some((problem) => problem.startsWith(name)),
        `${name} not named in ${error.message}`,
      );
    }
  });

  test('separate engines by default, sharing the cores between trainer and sampler', () => {
    const config = loadConfig({});
    assert.equal(config.engines.mode, 'separate');
    assert.equal(config.engines.samplers, 1);
    assert.ok(config.engines.samplerThreads! >= 1 && config.engines.trainerThreads! >= 1);
    assert.equal(config.engines.trainerNice, 10);
    assert.deepEqual(config.serving, {
      maxModelLen: null,
      maxNumSeqs: 32,
      maxNumBatchedTokens: 2048,
      kvCacheMemoryBytes: null,
      dtype: null,
    });
    const single = loadConfig({ ENGINES: 'single', TRAINER_URL: 'tcp://gpu:7000', ENGINE_SECRET: 's' });
    assert.deepEqual(
      [single.engines.mode, single.engines.trainerUrl, single.engines.samplerThreads],
      ['single', 'tcp://gpu:7000', null],
    );
  });

  test('the trainer group: one rank by default; sizes the host cannot launch are named in one error', () => {
    assert.deepEqual(loadConfig({}).engines.trainerGroup, { worldSize: 1, nodes: 1, rendezvous: null, timeoutS: 300 });
    const two = loadConfig({ TRAINER_WORLD_SIZE: '4', TRAINER_NNODES: '2', TRAINER_RDZV_ENDPOINT: 'node0:29400' });
    assert.deepEqual(two.engines.trainerGroup, { worldSize: 4, nodes: 2, rendezvous: 'node0:29400', timeoutS: 300 });
    assert.throws(
      () => loadConfig({ TRAINER_WORLD_SIZE: '3', TRAINER_NNODES: '2', TRAINER_RDZV_ENDPOINT: 'node0' }),
      (error: Error) =>
        /TRAINER_WORLD_SIZE=3: not a multiple of TRAINER_NNODES=2/.test(error.message) &&
        /TRAINER_RDZV_ENDPOINT="node0": expected host:port/.test(error.message),
    );
    assert.throws(() => loadConfig({ TRAINER_NNODES: '2' }), /TRAINER_RDZV_ENDPOINT: required/);
    for (const env of [{ ENGINES: 'single' }, { TRAINER_URL: 'tcp://gpu:7000', ENGINE_SECRET: 's' }])
      assert.throws(() => loadConfig({ ...env, TRAINER_WORLD_SIZE: '2' }), /launched where it runs/);
  });
});
