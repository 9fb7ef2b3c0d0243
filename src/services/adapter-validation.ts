/**
 * Checks an uploaded PEFT adapter against the base model it is meant for, before anything is kept: a LoRA config
 * this engine can run (rank, alpha, supported target modules, no DoRA or per-module patterns), a safetensors
 * header whose every tensor is a lora_A/lora_B of a real layer with the shapes the base's projections imply, and
 * values the engine may compute with (finite, within ±ADAPTER_WEIGHT_MAX_ABS of engine/bounds.json).
 * Each problem names the field or tensor at fault (and a value's first bad index).
 */
import type fs from 'node:fs/promises';
import { ADAPTER_WEIGHT_MAX_ABS } from '../engine/bounds.ts';
import type { FieldProblem } from '../errors.ts';

const TENSOR = /^base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.lora_([AB])(?:\.default)?\.weight$/;
const DTYPES = new Set(['F32', 'F16', 'BF16']);

export interface BaseDims {
  layers: number;
  hidden: number;
  intermediate: number;
  q: number;
  kv: number;
}

export function baseDims(config: Record<string, unknown>): BaseDims {
  const n = (key: string) => Number(config[key]);
  const headDim = Number(config.head_dim ?? n('hidden_size') / n('num_attention_heads'));
  const kvHeads = Number(config.num_key_value_heads ?? config.num_attention_heads);
  return {
    layers: n('num_hidden_layers'),
    hidden: n('hidden_size'),
    intermediate: n('intermediate_size'),
    q: headDim * n('num_attention_heads'),
    kv: headDim * kvHeads,
  };
}

/** (in, out) features of one projection. */
function projection(dims: BaseDims, module: string): [number, number] {
  const shapes: Record<string, [number, number]> = {
    q_proj: [dims.hidden, dims.q],
    k_proj: [dims.hidden, dims.kv],
    v_proj: [dims.hidden, dims.kv],
    o_proj: [dims.q, dims.hidden],
    gate_proj: [dims.hidden, dims.intermediate],
    up_proj: [dims.hidden, dims.intermediate],
    down_proj: [dims.intermediate, dims.hidden],
  };
  return shapes[module];
}

const problem = (loc: string[], msg: string): FieldProblem => ({ loc: ['body', ...loc], msg, type: 'value_error' });

/** `supported`: the target modules the engine announced (null where no engine runs here to ask). */
export function checkLoraConfig(config: Record<string, unknown>, supported: string[] | null): FieldProblem[] {
  const at = (key: string) => ['adapter_config.json', key];
  const problems: FieldProblem[] = [];
  if ((config.peft_type ?? 'LORA') !== 'LORA')
    problems.push(problem(at('peft_type'), `${JSON.stringify(config.peft_type)} is not LORA`));
  if (!Number.isInteger(config.r) || (config.r as number) < 1)
    problems.push(problem(at('r'), 'the rank must be a positive integer'));
  if (config.lora_alpha !== undefined && typeof config.lora_alpha !== 'number')
    problems.push(problem(at('lora_alpha'), 'must be a number'));
  const targets = config.target_modules;
  if (!Array.isArray(targets) || targets.length === 0)
    problems.push(problem(at('target_modules'), 'must be a non-empty list of module names'));
  else if (supported)
    for (const name of targets)
      if (!supported.includes(name))
        problems.push(
          problem(at('target_modules'), `${JSON.stringify(name)} is not supported; supported: ${supported.join(', ')}`),
        );
  for (const key of ['use_dora', 'rank_pattern', 'alpha_pattern', 'modules_to_save', 'layers_to_transform']) {
    const value = config[key];
    if (value && !(typeof value === 'object' && Object.keys(value).length === 0))
      problems.push(problem(at(key), 'is not supported by this engine'));
  }
  return problems;
}

/** The tensors of a safetensors header against the base's shapes and the config's rank and targets. */
export function checkLoraTensors(
  header: Record<string, unknown>,
  rank: number,
  targets: string[],
  dims: BaseDims,
  dataBytes: number,
): FieldProblem[] {
  const problems: FieldProblem[] = [];
  const seen = new Set<string>();
  for (const [name, raw] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const at = ['adapter_model.safetensors', name];
    const tensor = raw as { dtype?: string; shape?: number[]; data_offsets?: number[] };
    const match = TENSOR.exec(name);
    if (!match) {
      problems.push(problem(at, 'not a LoRA tensor of a decoder layer projection'));
      continue;
    }
    const [layer, module, ab] = [Number(match[1]), match[3], match[4]];
    const [fanIn, fanOut] = projection(dims, module) ?? [];
    if (layer >= dims.layers) problems.push(problem(at, `layer ${layer}: the base model has ${dims.layers} layers`));
    else if (fanIn === undefined || !targets.includes(module))
      problems.push(problem(at, `module ${module} is not among target_modules`));
    else {
      const expected = ab === 'A' ? [rank, fanIn] : [fanOut, rank];
      if (JSON.stringify(tensor.shape) !== JSON.stringify(expected))
        problems.push(
          problem(
            at,
            `shape ${JSON.stringify(tensor.shape)}; the base model and rank ${rank} need ${JSON.stringify(expected)}`,
          ),
        );
    }
    if (!DTYPES.has(tensor.dtype ?? ''))
      problems.push(problem(at, `dtype ${tensor.dtype} (expected F32, F16 or BF16)`));
    const [start, end] = tensor.data_offsets ?? [];
    if (!(Number.isInteger(start) && Number.isInteger(end) && start <= end && end <= dataBytes))
      problems.push(problem(at, 'data offsets outside the file'));
    else if (DTYPES.has(tensor.dtype ?? '') && Array.isArray(tensor.shape)) {
      const needed = tensor.shape.reduce((n, d) => n * d, 1) * elementBytes(tensor.dtype!);
      if (end - start !== needed)
        problems.push(
          problem(
            at,
            `data of ${end - start} bytes, but shape ${JSON.stringify(tensor.shape)} of ${tensor.dtype} needs ${needed}`,
          ),
        );
    }
    seen.add(`${layer}.${module}.${ab}`);
  }
  for (const key of seen) {
    const twin = key.endsWith('A') ? `${key.slice(0, -1)}B` : `${key.slice(0, -1)}A`;
    if (!seen.has(twin))
      problems.push(
        problem(
          ['adapter_model.safetensors'],
          `layer ${key.split('.')[0]} ${key.split('.')[1]} has lora_${key.at(-1)} without its lora_${twin.at(-1)}`,
        ),
      );
  }
  if (seen.size === 0) problems.push(problem(['adapter_model.safetensors'], 'holds no LoRA tensors'));
  return problems;
}

const elementBytes = (dtype: string) => (dtype === 'F32' ? 4 : 2);

/** Bytes read at once while scanning values: a multiple of every element size. */
const SCAN_CHUNK_BYTES = 1 << 22;

/**
 * Each tensor's first value that is not finite or beyond ±ADAPTER_WEIGHT_MAX_ABS, as a problem naming the tensor
 * and that value's index. `dataStart` is where the safetensors data begins in `handle`; the header has passed
 * checkLoraTensors (known dtypes, offsets inside the file).
 */
export async function checkLoraValues(
  handle: fs.FileHandle,
  dataStart: number,
  header: Record<string, unknown>,
): Promise<FieldProblem[]> {
  const problems: FieldProblem[] = [];
  const buffer = Buffer.allocUnsafeSlow(SCAN_CHUNK_BYTES); // its own ArrayBuffer: typed views start aligned
  for (const [name, raw] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const {
      dtype,
      shape,
      data_offsets: [start, end],
    } = raw as { dtype: string; shape: number[]; data_offsets: number[] };
    const size = elementBytes(dtype);
    for (let at = start; at < end; at += SCAN_CHUNK_BYTES) {
      const length = Math.min(SCAN_CHUNK_BYTES, end - at);
      await handle.read(buffer, 0, length, dataStart + at);
      const bad = firstBadValue(dtype, buffer, length / size);
      if (bad === null) continue;
      const index = unravel((at - start) / size + bad.index, shape);
      problems.push(
        problem(
          ['adapter_model.safetensors', name],
          `value ${bad.value} at index ${JSON.stringify(index)}: adapter values must be finite and within ±${ADAPTER_WEIGHT_MAX_ABS}`,
        ),
      );
      break;
    }
  }
  return problems;
}

/** The first element (of `count` little-endian `dtype` values in `bytes`) out of bounds, or null. */
function firstBadValue(dtype: string, bytes: Buffer, count: number): { index: number; value: number } | null {
  if (dtype === 'F32') {
    const values = new Float32Array(bytes.buffer, bytes.byteOffset, count);
    for (let i = 0; i < count; i += 1)
      if (!(Math.abs(values[i]) <= ADAPTER_WEIGHT_MAX_ABS)) return { index: i, value: values[i] };
    return null;
  }
  const halves = new Uint16Array(bytes.buffer, bytes.byteOffset, count);
  const decode = dtype === 'BF16' ? bfloat16 : float16;
  for (let i = 0; i < count; i += 1) {
    const value = decode(halves[i]);
    if (!(Math.abs(value) <= ADAPTER_WEIGHT_MAX_ABS)) return { index: i, value };
  }
  return null;
}

const widened = new Float32Array(1);
const widenedBits = new Uint32Array(widened.buffer);

/** bfloat16 is the top half of a float32. */
function bfloat16(bits: number): number {
  widenedBits[0] = bits << 16;
  return widened[0];
}

function float16(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const mantissa = bits & 0x3ff;
  if (exponent === 0x1f) return mantissa ? Number.NaN : sign * Infinity;
  if (exponent === 0) return sign * mantissa * 2 ** -24; // subnormal
  return sign * (1 + mantissa / 1024) * 2 ** (exponent - 15);
}

function unravel(flat: number, shape: number[]): number[] {
  const index: number[] = [];
  for (let axis = shape.length - 1; axis >= 0; axis -= 1) {
    index.unshift(flat % shape[axis]);
    flat = Math.floor(flat / shape[axis]);
  }
  return index;
}
