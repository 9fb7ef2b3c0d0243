/**
 * The engine's numeric bounds as the API states them: read from engine/bounds.json, the file the engine's own
 * checks read (engine/schema.py), so a request the API accepts is never refused by the engine.
 */
import bounds from '../../engine/bounds.json' with { type: 'json' };

export interface Bound {
  min: number;
  max: number;
  min_exclusive?: boolean;
  integer?: boolean;
}

export type SamplingBoundName = keyof typeof bounds.sampling;

/** The bound of one sampling parameter, by its vLLM name. */
export const SAMPLING_BOUNDS: Record<SamplingBoundName, Bound> = bounds.sampling;

/** Temperatures below this sample the argmax (the engine decodes greedily); the reason is in the JSON. */
export const GREEDY_TEMPERATURE_BELOW: number = bounds.greedy_temperature_below.value;

/** Largest magnitude an adapter value may have (every value must also be finite); the reason is in the JSON. */
export const ADAPTER_WEIGHT_MAX_ABS: number = bounds.adapter_weight_max_abs.value;

export function withinBound(name: SamplingBoundName, value: number): boolean {
  const b = SAMPLING_BOUNDS[name];
  return (
    (b.min_exclusive ? value > b.min : value >= b.min) && value <= b.max && (!b.integer || Number.isInteger(value))
  );
}

/** "(0, 1000000]"-style interval text for error messages. */
export function boundText(name: SamplingBoundName): string {
  const b = SAMPLING_BOUNDS[name];
  return `${b.min_exclusive ? '(' : '['}${b.min}, ${b.max}]`;
}

/** The bound as JSON-schema keywords (TypeBox options) for request schemas. */
export function boundSchema(name: SamplingBoundName): { minimum?: number; exclusiveMinimum?: number; maximum: number } {
  const b = SAMPLING_BOUNDS[name];
  return b.min_exclusive ? { exclusiveMinimum: b.min, maximum: b.max } : { minimum: b.min, maximum: b.max };
}
