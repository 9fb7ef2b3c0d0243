/**
 * Trajectories as ART 0.5.20+ sends them: every field still at its default is left out of the JSON (a reward of 0.0,
 * null tools, empty lists and maps, null policy versions, and at group level empty exceptions/metadata/metrics/logs).
 * The real server reads each with ART's own default, for RL jobs, `/log` and what the dashboard shows; and refuses
 * what has nothing in it (no trajectory to train on, no messages), naming the field.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sampleChoice, waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

describe('compact trajectories (ART 0.5.20+ JSON)', () => {
  let e2e: E2eServer;
  let modelId: string;
  const prompt = { role: 'user', content: 'Name a colour.' };
  let choices: Record<string, unknown>[];

  before(async () => {
    e2e = await startE2eServer();
    modelId = (
      await e2e.api('POST', '/v1/preview/models', {
        project: 'compact',
        name: 'policy',
        base_model: 'builtin/tiny-chat',
      })
    ).body.id;
    choices = await Promise.all(
      [0, 1, 2, 3].map((seed) => sampleChoice(e2e, 'local/compact/policy', prompt.content, seed)),
    );
  });
  after(async () => {
    await e2e.close();
  });

  test('an RL job of groups that leave out every default trains: a missing reward is 0.0', async () => {
    const groups = [
      // The reward of the first trajectory is left out (0.0): only that makes this group trainable.
      {
        trajectories: [
          { messages_and_choices: [prompt, choices[0]] },
          { messages_and_choices: [prompt, choices[1]], reward: 1 },
        ],
      },
      // All rewards 0.0, so nothing is sent but the messages; and 0.5.18-style nulls for lists and maps.
      {
        trajectories: [
          { messages_and_choices: [prompt, choices[2]] },
          { messages_and_choices: [prompt, choices[3]], additional_histories: null, metrics: null, logs: null },
        ],
      },
    ];
    const submitted = await e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: modelId,
      trajectory_groups: groups,
    });
    assert.equal(submitted.status, 200, JSON.stringify(submitted.body));
    const job = await waitForJob(e2e, submitted.body.id, 600_000);
    assert.equal(job.status, 'COMPLETED', JSON.stringify(job.error));
    assert.equal(job.metrics.num_groups_trainable, 1);
    assert.equal(job.metrics.reward, 0.25);
    assert.ok(Number.isFinite(job.metrics.loss), JSON.stringify(job.metrics));

    // The dashboard shows each trained trajectory with ART's defaults in place.
    const listed = await e2e.api('GET', `/v1/dashboard/models/${modelId}/trajectories?split=train&limit=10`);
    assert.deepEqual(
      listed.body.data.map((row: { reward: number }) => row.reward),
      [0, 1, 0, 0],
    );
    const detail = await e2e.api('GET', `/v1/dashboard/models/${modelId}/trajectories/${listed.body.data[3].id}`);
    const { data } = detail.body;
    assert.deepEqual(
      [
        data.reward,
        data.tools,
        data.additional_histories,
        data.metrics,
        data.metadata,
        data.logs,
        data.initial_policy_version,
        data.final_policy_version,
      ],
      [0, null, [], {}, {}, [], null, null],
    );
  });

  test('/log reads left-out fields as ART does: a group of only exceptions counts in the exception rate', async () => {
    const groups = [
      {
        trajectories: [
          { messages_and_choices: [prompt, choices[0]] },
          { messages_and_choices: [prompt, choices[1]], reward: 1, metrics: { turns: 2 } },
        ],
      },
      // ART leaves out the empty trajectory list of a group whose every rollout failed.
      { exceptions: [{ type: 'TimeoutError', message: 'rollout timed out', traceback: '' }] },
    ];
    const logged = await e2e.api('POST', `/v1/preview/models/${modelId}/log`, {
      split: 'val',
      trajectory_groups: groups,
    });
    assert.equal(logged.status, 200, JSON.stringify(logged.body));
    assert.equal(logged.body.metrics['val/reward'], 0.5);
    assert.equal(logged.body.metrics['val/num_trajectories'], 2);
    assert.equal(logged.body.metrics['val/exception_rate'], 1 / 3);
    assert.equal(logged.body.metrics['val/turns'], 2);
  });

  test('nothing to train or log, or an unknown loss_fn, is a 422 naming the field', async () => {
    const rl = (groups: unknown[]) =>
      ['/v1/preview/training-jobs', { model_id: modelId, trajectory_groups: groups }] as const;
    const log = (groups: unknown[]) =>
      [`/v1/preview/models/${modelId}/log`, { split: 'val', trajectory_groups: groups }] as const;
    const cases: [readonly [string, Record<string, unknown>], (string | number)[], string][] = [
      [rl([{ trajectories: [] }]), ['body', 'trajectory_groups', 0, 'trajectories'], 'too_short'],
      [rl([{}]), ['body', 'trajectory_groups', 0, 'trajectories'], 'missing'],
      [
        rl([{ trajectories: [{ reward: 1 }] }]),
        ['body', 'trajectory_groups', 0, 'trajectories', 0, 'messages_and_choices'],
        'missing',
      ],
      [
        rl([{ trajectories: [{ messages_and_choices: [], reward: 1 }] }]),
        ['body', 'trajectory_groups', 0, 'trajectories', 0, 'messages_and_choices'],
        'too_short',
      ],
      // ART 0.5.23's captured-exchanges form with nothing captured: the exchanges are named, not the legacy field.
      [
        rl([{ trajectories: [{ exchanges: { chat_completions: [] } }] }]),
        ['body', 'trajectory_groups', 0, 'trajectories', 0, 'exchanges'],
        'too_short',
      ],
      // An unknown loss function is named, never trained as the default one.
      [
        [
          '/v1/preview/training-jobs',
          {
            model_id: modelId,
            trajectory_groups: [{ trajectories: [{ messages_and_choices: [prompt, choices[0]], reward: 1 }] }],
            experimental_config: { loss_fn: 'grpo' },
          },
        ],
        ['body', 'experimental_config', 'loss_fn'],
        'literal_error',
      ],
      // A log may record a group that only failed, but not one with nothing at all, nor a trajectory without messages.
      [log([{ trajectories: [], exceptions: [] }]), ['body', 'trajectory_groups', 0, 'trajectories'], 'too_short'],
      [log([{}]), ['body', 'trajectory_groups', 0, 'trajectories'], 'missing'],
      [
        log([{ trajectories: [{ reward: 1 }] }]),
        ['body', 'trajectory_groups', 0, 'trajectories', 0, 'messages_and_choices'],
        'missing',
      ],
      [
        log([{ trajectories: [{ messages_and_choices: [], reward: 1 }] }]),
        ['body', 'trajectory_groups', 0, 'trajectories', 0, 'messages_and_choices'],
        'too_short',
      ],
    ];
    for (const [[route, body], loc, type] of cases) {
      const response = await e2e.api('POST', route, body);
      assert.equal(response.status, 422, `${route} ${JSON.stringify(body)}: ${JSON.stringify(response.body)}`);
      const named = response.body.detail.some(
        (d: { loc: unknown[]; type: string }) => JSON.stringify(d.loc) === JSON.stringify(loc) && d.type === type,
      );
      assert.ok(named, `${JSON.stringify(loc)} ${type} in ${JSON.stringify(response.body.detail)}`);
    }
  });
});
