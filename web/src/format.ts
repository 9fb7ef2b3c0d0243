/** Number, time and id formatting shared by every page. */
import { TRAINING_METRICS } from '../../src/api/training-vocabulary.ts';

export function num(value: unknown, digits = 4): string {
  if (typeof value !== 'number' || !Number.isFinite(value)) return '—';
  if (Number.isInteger(value) && Math.abs(value) < 1e9) return value.toLocaleString('en-US');
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) return value.toExponential(2);
  return Number(value.toPrecision(digits)).toLocaleString('en-US', { maximumFractionDigits: 6 });
}

const trimZeros = (text: string) =>
  text.includes('.') && !text.includes('e') ? text.replace(/0+$/, '').replace(/\.$/, '') : text;

/** Axis tick labels: as many digits as the tick spacing needs, so neighbours never read the same. */
export function tick(value: number, step = 0): string {
  if (value === 0) return '0';
  if (!(step > 0)) return String(Number(value.toPrecision(3)));
  const exponent = Math.floor(Math.log10(step));
  const mantissa = step / 10 ** exponent;
  const extra = Math.abs(mantissa - Math.round(mantissa)) > 1e-9 ? 1 : 0;
  if (Math.abs(value) >= 1e4 && step >= 1000)
    return `${trimZeros((value / 1000).toFixed(Math.max(0, 3 - exponent + extra)))}k`;
  if (step < 1e-5) return value.toExponential(Math.max(0, Math.floor(Math.log10(Math.abs(value))) - exponent + extra));
  return trimZeros(value.toFixed(Math.max(0, -exponent + extra)));
}

/** A byte count in the unit that reads best (KiB to GiB, binary). */
export function bytes(value: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let scaled = value;
  let unit = 0;
  while (Math.abs(scaled) >= 1024 && unit < units.length - 1) {
    scaled /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? scaled : scaled.toFixed(scaled < 10 ? 2 : 1)} ${units[unit]}`;
}

export function shortId(id: string): string {
  return id.length > 12 ? id.slice(-8) : id;
}

export function relativeTime(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '—';
  const seconds = Math.round((now - Date.parse(iso)) / 1000);
  if (!Number.isFinite(seconds)) return iso;
  if (seconds < 5) return 'just now';
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return new Date(iso).toLocaleDateString('en-US', { year: 'numeric', month: 'short', day: 'numeric' });
}

export function absoluteTime(iso: string | null | undefined): string {
  if (!iso) return '';
  return new Date(iso).toLocaleString('en-US', { dateStyle: 'medium', timeStyle: 'medium' });
}

export function duration(
  fromIso: string | null | undefined,
  toIso: string | null | undefined,
  now = Date.now(),
): string {
  if (!fromIso) return '—';
  const ms = (toIso ? Date.parse(toIso) : now) - Date.parse(fromIso);
  if (!Number.isFinite(ms) || ms < 0) return '—';
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
  return `${Math.floor(ms / 3_600_000)} h ${Math.round((ms % 3_600_000) / 60_000)} min`;
}

/** Metric names for people: `train/grad_norm` → `grad norm`. */
export function metricLabel(name: string): string {
  return TRAINING_METRICS[name]?.label ?? name.replace(/_/g, ' ').replace(/^./, (c) => c.toUpperCase());
}
