/**
 * One trajectory, readable: each message with its role, reasoning apart from the answer, tool calls with
 * their arguments as formatted JSON, tool results tied to their call, then tools, metrics, metadata, logs
 * and additional histories. Everything enters the DOM as text.
 */

import { splitReasoning } from '../../src/conversation/reasoning.ts';
import type { TrajectoryDetail } from './api.ts';
import { type Child, h } from './dom.ts';
import { num } from './format.ts';
import { tokenView } from './token-view.ts';

type Json = Record<string, unknown>;

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => {
        if (!isObject(part)) return '';
        if (typeof part.text === 'string') return part.text;
        if (part.type === 'image_url') return '[image]';
        return `[${String(part.type ?? 'part')}]`;
      })
      .join('');
  }
  if (content === null || content === undefined) return '';
  return JSON.stringify(content, null, 2);
}

/** Pretty JSON when the text is JSON, otherwise the text as is. */
function prettyMaybeJson(text: string): { text: string; json: boolean } {
  const trimmed = text.trim();
  if (!/^[[{]/.test(trimmed)) return { text, json: false };
  try {
    return { text: JSON.stringify(JSON.parse(trimmed), null, 2), json: true };
  } catch {
    return { text, json: false };
  }
}

function toolCallView(call: Json, index: number): HTMLElement {
  const fn = isObject(call.function) ? call.function : call;
  const name = String(fn.name ?? '(unnamed)');
  const rawArgs = fn.arguments;
  const args = typeof rawArgs === 'string' ? prettyMaybeJson(rawArgs).text : JSON.stringify(rawArgs ?? {}, null, 2);
  return h(
    'div',
    { class: 'tool-call' },
    h(
      'div',
      { class: 'tool-call-head' },
      h('span', { class: 'pill pill-tool' }, 'tool call'),
      h('code', { class: 'tool-name' }, name),
      call.id
        ? h('span', { class: 'muted small mono' }, String(call.id))
        : h('span', { class: 'muted small' }, `#${index + 1}`),
    ),
    h('pre', { class: 'code' }, args),
  );
}

function messageView(item: Json, toolNames: Map<string, string>): HTMLElement {
  const choice = isObject(item.message) ? item : null;
  const message = choice ? (item.message as Json) : item;
  const role = choice ? 'assistant' : String(message.role ?? 'unknown');
  const badges: Child[] = [];
  if (choice) {
    badges.push(h('span', { class: 'pill', title: 'An OpenAI Choice as returned by chat completions' }, 'choice'));
    if (choice.logprobs)
      badges.push(
        h('span', { class: 'pill pill-ok', title: 'Carries sampled logprobs, so it is trained on' }, 'logprobs'),
      );
    if (choice.finish_reason) badges.push(h('span', { class: 'pill' }, `finish: ${String(choice.finish_reason)}`));
  }
  if (message.name) badges.push(h('span', { class: 'pill' }, String(message.name)));

  const body: Child[] = [];
  let content = textOf(message.content);
  let reasoning =
    typeof message.reasoning === 'string'
      ? message.reasoning
      : typeof message.reasoning_content === 'string'
        ? message.reasoning_content
        : null;
  if (role === 'assistant' && !reasoning) {
    const split = splitReasoning(content);
    reasoning = split.reasoning;
    content = split.answer;
  }
  if (reasoning) {
    body.push(
      h(
        'details',
        { class: 'reasoning', open: true },
        h('summary', 'Reasoning'),
        h('div', { class: 'text' }, reasoning),
      ),
    );
  }
  if (role === 'tool') {
    const callId = String(message.tool_call_id ?? '');
    const name = toolNames.get(callId);
    badges.unshift(h('span', { class: 'pill pill-tool' }, name ? `result of ${name}` : 'tool result'));
    if (callId) badges.push(h('span', { class: 'muted small mono' }, callId));
    const pretty = prettyMaybeJson(content);
    body.push(pretty.json ? h('pre', { class: 'code' }, pretty.text) : h('div', { class: 'text' }, content));
  } else if (content) {
    body.push(h('div', { class: 'text' }, content));
  }
  const calls = Array.isArray(message.tool_calls) ? (message.tool_calls as Json[]) : [];
  for (const [index, call] of calls.entries()) body.push(toolCallView(call, index));
  if (body.length === 0) body.push(h('div', { class: 'text muted' }, '(empty)'));

  return h(
    'article',
    { class: `msg msg-${role}`, 'data-role': role },
    h('header', { class: 'msg-head' }, h('span', { class: 'role' }, role), badges),
    body,
  );
}

export function conversationView(items: unknown[]): HTMLElement {
  const toolNames = new Map<string, string>();
  for (const item of items) {
    if (!isObject(item)) continue;
    const message = isObject(item.message) ? item.message : item;
    for (const call of Array.isArray(message.tool_calls) ? message.tool_calls : []) {
      if (!isObject(call)) continue;
      const fn = isObject(call.function) ? call.function : call;
      if (call.id) toolNames.set(String(call.id), String(fn.name ?? ''));
    }
  }
  return h(
    'div',
    { class: 'conversation' },
    items.filter(isObject).map((item) => messageView(item, toolNames)),
  );
}

function toolsView(tools: unknown): HTMLElement | null {
  if (!Array.isArray(tools) || tools.length === 0) return null;
  return h(
    'details',
    { class: 'section-details' },
    h('summary', `Tools (${tools.length})`),
    tools.filter(isObject).map((tool) => {
      const fn = isObject(tool.function) ? tool.function : tool;
      return h(
        'div',
        { class: 'tool-def' },
        h('code', { class: 'tool-name' }, String(fn.name ?? '(unnamed)')),
        fn.description ? h('p', { class: 'muted' }, String(fn.description)) : null,
        fn.parameters ? h('pre', { class: 'code' }, JSON.stringify(fn.parameters, null, 2)) : null,
      );
    }),
  );
}

function keyValues(title: string, record: unknown): HTMLElement | null {
  if (!isObject(record) || Object.keys(record).length === 0) return null;
  return h(
    'div',
    { class: 'kv-block' },
    h('h3', title),
    h(
      'dl',
      { class: 'kv' },
      Object.entries(record).map(([key, value]) => [
        h('dt', key),
        h('dd', typeof value === 'number' ? num(value) : typeof value === 'string' ? value : JSON.stringify(value)),
      ]),
    ),
  );
}

/** `advantage`: the trajectory's, when its whole group is known to the caller (colours the tokens). */
export function trajectoryView(trajectory: TrajectoryDetail, advantage: number | null = null): HTMLElement {
  const data = trajectory.data;
  const { conversation } = trajectory;
  const items = conversation.messages_and_choices;
  const histories = conversation.additional_histories;
  // A captured trajectory's other conversations are branches of its rollout (ART's histories), not extra histories.
  const historyLabel = conversation.form === 'captured' ? 'Branch' : 'Additional history';
  const logs = Array.isArray(data.logs) ? data.logs : [];
  const reward = trajectory.reward;
  return h(
    'article',
    { class: 'trajectory', 'aria-label': `Trajectory ${trajectory.group_index}.${trajectory.trajectory_index}` },
    h(
      'header',
      { class: 'trajectory-head' },
      h('h2', `Group ${trajectory.group_index} · trajectory ${trajectory.trajectory_index}`),
      h(
        'div',
        { class: 'trajectory-meta' },
        h(
          'span',
          { class: 'reward-big', title: 'Reward' },
          h('span', { class: 'stat-label' }, 'reward '),
          reward === null ? '—' : num(reward),
        ),
        h('span', { class: 'muted' }, `split ${trajectory.split} · step ${trajectory.step} · ${items.length} messages`),
        conversation.form === 'captured'
          ? h(
              'span',
              { class: 'pill', title: "Captured with ART's art.Trajectory(): the exchanges as its clients made them" },
              `captured: ${conversation.kinds.join(', ')}`,
            )
          : null,
      ),
    ),
    conversationView(items),
    tokenView(items, advantage, trajectory.trained_tokens ?? null),
    toolsView(conversation.tools),
    histories.map((history, index) =>
      h(
        'details',
        { class: 'section-details', open: true },
        h('summary', `${historyLabel} ${index + 1}`),
        conversationView(history.messages_and_choices),
        toolsView(history.tools),
      ),
    ),
    h('div', { class: 'kv-grid' }, keyValues('Metrics', data.metrics), keyValues('Metadata', data.metadata)),
    logs.length > 0
      ? h(
          'details',
          { class: 'section-details' },
          h('summary', `Logs (${logs.length})`),
          h(
            'pre',
            { class: 'code' },
            logs.map((line) => (typeof line === 'string' ? line : JSON.stringify(line))).join('\n'),
          ),
        )
      : null,
    h(
      'details',
      { class: 'section-details' },
      h('summary', 'Raw JSON'),
      h('pre', { class: 'code' }, JSON.stringify(data, null, 2)),
    ),
  );
}
