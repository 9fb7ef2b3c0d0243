/**
 * The engines behind the service, from the system check: each engine's role, process and state, and where its memory
 * goes by kind (a trainer's per rank: its share of the base, adapters, Adam moments, the last training op's peak).
 * Refreshed every few seconds; needs no key.
 */
import type { EngineReport, SystemCheckResponse } from '../api.ts';
import { badge, errorBox, h, replace, spinner } from '../dom.ts';
import { bytes } from '../format.ts';
import type { RouteContext } from '../router.ts';

const REFRESH_MS = 5000;
/** The memory kinds an engine's `stats` reports, in the order a reader weighs them. */
const KINDS: [string, string][] = [
  ['weights_bytes', 'Base weights (this process’s share)'],
  ['adapters_bytes', 'Adapters'],
  ['optimizer_bytes', 'Adam moments'],
  ['kv_cache_bytes', 'KV cache'],
  ['prefix_cache_bytes', 'Prefix cache'],
  ['activations_peak_bytes', 'Last training op’s peak'],
  ['device_allocated_bytes', 'GPU allocated'],
  ['device_peak_bytes', 'GPU peak'],
];

interface Column {
  label: string;
  rss?: number;
  memory?: Record<string, number>;
}

function memoryTable(columns: Column[]): HTMLElement {
  const shown = KINDS.filter(([kind]) => columns.some((column) => column.memory?.[kind] !== undefined));
  const cell = (value: number | undefined) => h('td', { class: 'num' }, value === undefined ? '—' : bytes(value));
  return h(
    'div',
    { class: 'table-wrap' },
    h(
      'table',
      { class: 'table' },
      h(
        'thead',
        h(
          'tr',
          h('th', 'Memory'),
          columns.map((column) => h('th', { class: 'num' }, column.label)),
        ),
      ),
      h(
        'tbody',
        h(
          'tr',
          h('th', 'Resident (RSS)'),
          columns.map((column) => cell(column.rss)),
        ),
        shown.map(([kind, label]) =>
          h(
            'tr',
            h('th', label),
            columns.map((column) => cell(column.memory?.[kind])),
          ),
        ),
      ),
    ),
  );
}

function engineCard(engine: EngineReport): HTMLElement {
  const ranks = engine.ranks ?? [];
  const columns: Column[] =
    ranks.length > 0
      ? ranks.map((rank) => ({
          label: `rank ${rank.rank} · pid ${rank.pid} · ${rank.device}${ranks.some((r) => r.host !== rank.host) ? ` · ${rank.host}` : ''}`,
          rss: rank.rss_bytes,
          memory: rank.memory,
        }))
      : [
          {
            label: engine.pid === null ? (engine.url ?? 'remote') : `pid ${engine.pid}`,
            rss: engine.rss_bytes,
            memory: engine.memory,
          },
        ];
  const facts = [
    engine.device && `${engine.device}${engine.dtype ? `, ${engine.dtype}` : ''}`,
    ranks.length > 1 && `${ranks.length} ranks (FSDP2)`,
    engine.pid !== null && `${ranks.length > 1 ? 'launcher ' : ''}pid ${engine.pid}`,
    engine.url,
    `${engine.restarts} restart${engine.restarts === 1 ? '' : 's'}`,
  ].filter(Boolean);
  return h(
    'section',
    { class: 'card', 'data-role': engine.role },
    h('div', { class: 'section-head' }, h('h2', `${engine.role} · ${engine.kind}`), badge(engine.state)),
    h('p', { class: 'muted small' }, facts.join(' · ')),
    engine.error ? errorBox(engine.error) : null,
    engine.memory || ranks.length ? memoryTable(columns) : null,
  );
}

async function systemCheck(signal: AbortSignal): Promise<SystemCheckResponse> {
  // 503 still carries the report: which engine is down, and why.
  const response = await fetch('/v1/system-check', { signal });
  return (await response.json()) as SystemCheckResponse;
}

export async function renderEngines({ main, signal }: RouteContext): Promise<() => void> {
  const body = h('div', spinner());
  replace(main, h('div', { class: 'page-head' }, h('h1', 'Engines')), body);
  const refresh = async () => {
    try {
      const { engine } = await systemCheck(signal);
      const engines = (engine.engines ?? []) as EngineReport[];
      replace(body, engine.error ? errorBox(engine.error) : null, engines.map(engineCard));
    } catch (error) {
      if (!signal.aborted) replace(body, errorBox(error));
    }
  };
  await refresh();
  const timer = setInterval(() => void refresh(), REFRESH_MS);
  return () => clearInterval(timer);
}
