/**
 * A strict reader of Prometheus' text exposition format (0.0.4), written from its grammar: every line is a
 * HELP, a TYPE or a sample; names and label names match the format's patterns; label values use only its
 * three escapes; each family's TYPE comes before its samples; histogram buckets are cumulative and end at +Inf
 * with the family's _count. Anything else throws, naming the line.
 */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|(?=\}))/y;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);
const SUFFIXES: Record<string, string[]> = {
  histogram: ['_bucket', '_sum', '_count'],
  summary: ['_sum', '_count', ''],
};

function parseValue(raw: string, line: number): number {
  if (raw === '+Inf') return Infinity;
  if (raw === '-Inf') return -Infinity;
  if (raw === 'NaN') return NaN;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(raw))
    throw new Error(`line ${line}: bad value ${JSON.stringify(raw)}`);
  return Number(raw);
}

function parseLabels(text: string, line: number): { labels: Record<string, string>; rest: string } {
  if (!text.startsWith('{')) return { labels: {}, rest: text };
  const labels: Record<string, string> = {};
  LABEL.lastIndex = 1;
  let at = 1;
  while (text[at] !== '}') {
    LABEL.lastIndex = at;
    const match = LABEL.exec(text);
    if (!match) throw new Error(`line ${line}: bad label at ${JSON.stringify(text.slice(at, at + 30))}`);
    if (match[1] in labels) throw new Error(`line ${line}: label ${match[1]} repeated`);
    labels[match[1]] = match[2].replace(/\\(.)/g, (_all, c: string) => (c === 'n' ? '\n' : c));
    at = LABEL.lastIndex;
  }
  return { labels, rest: text.slice(at + 1) };
}

/** The family a sample belongs to, given the families TYPEd so far. */
function familyOf(name: string, types: Map<string, string>): string | undefined {
  if (types.has(name) && !SUFFIXES[types.get(name)!]) return name;
  for (const [family, type] of types)
    for (const suffix of SUFFIXES[type] ?? []) if (name === family + suffix) return family;
  return undefined;
}

export function parsePrometheusText(text: string): Sample[] {
  if (!text.endsWith('\n')) throw new Error('exposition must end with a newline');
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  text
    .slice(0, -1)
    .split('\n')
    .forEach((raw, index) => {
      const line = index + 1;
      const meta = /^# (HELP|TYPE) (\S+) (.*)$/.exec(raw);
      if (meta) {
        if (!NAME.test(meta[2])) throw new Error(`line ${line}: bad metric name ${meta[2]}`);
        if (meta[1] === 'TYPE') {
          if (!TYPES.has(meta[3]) || types.has(meta[2])) throw new Error(`line ${line}: bad or repeated TYPE`);
          types.set(meta[2], meta[3]);
        }
        return;
      }
      if (raw.startsWith('#') || raw === '') return;
      const name = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(raw)?.[0];
      if (!name) throw new Error(`line ${line}: not a sample: ${JSON.stringify(raw)}`);
      const { labels, rest } = parseLabels(raw.slice(name.length), line);
      const fields = /^ (\S+)( -?\d+)?$/.exec(rest);
      if (!fields) throw new Error(`line ${line}: expected " value [timestamp]" after the labels`);
      if (familyOf(name, types) === undefined) throw new Error(`line ${line}: sample ${name} before its TYPE`);
      samples.push({ name, labels, value: parseValue(fields[1], line) });
    });
  checkHistograms(samples, types);
  return samples;
}

function checkHistograms(samples: Sample[], types: Map<string, string>): void {
  for (const [family, type] of types) {
    if (type !== 'histogram') continue;
    const series = new Map<string, Sample[]>();
    for (const sample of samples.filter((s) => s.name === `${family}_bucket`)) {
      const { le, ...rest } = sample.labels;
      if (le === undefined) throw new Error(`${family}_bucket without le`);
      const key = JSON.stringify(rest);
      series.set(key, [...(series.get(key) ?? []), sample]);
    }
    for (const [key, buckets] of series) {
      const bounds = buckets.map((b) => parseValue(b.labels.le, 0));
      if (bounds.at(-1) !== Infinity) throw new Error(`${family}${key}: last bucket is not +Inf`);
      buckets.forEach((b, i) => {
        if (i > 0 && (bounds[i] <= bounds[i - 1] || b.value < buckets[i - 1].value))
          throw new Error(`${family}${key}: buckets not cumulative`);
      });
      const count = samples.find((s) => s.name === `${family}_count` && JSON.stringify(s.labels) === key);
      if (count?.value !== buckets.at(-1)!.value)
        throw new Error(`${family}${key}: _count differs from the +Inf bucket`);
    }
  }
}

/** The sum over the series of `name` that carry `labels` (0 when none, as a counter that has not moved yet). */
export function sampleSum(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  const hits = samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  return hits.reduce((sum, s) => sum + s.value, 0);
}
