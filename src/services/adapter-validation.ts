/**
 * Checks an uploaded PEFT adapter against the base model it is meant for, before anything is kept: a LoRA config
 * this engine can run (rank, alpha, supported target modules, no DoRA or per-module patterns) and a safetensors
 * header whose every tensor is a lora_A/lora_B of a real layer with the shapes the base's projections imply.
 * Each problem names the field or tensor at fault.
 */
import type { FieldProblem } from '../errors.ts';

/** The modules engine/lora.py can adapt (its SUPPORTED_TARGETS). */
export const SUPPORTED_TARGETS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];
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
  return { layers: n('num_hidden_layers'), hidden: n('hidden_size'), intermediate: n('intermediate_size'), q: headDim * n('num_attention_heads'), kv: headDim * kvHeads };
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

export function checkLoraConfig(config: Record<string, unknown>): FieldProblem[] {
  const at = (key: string) => ['adapter_config.json', key];
  const problems: FieldProblem[] = [];
  if ((config.peft_type ?? 'LORA') !== 'LORA') problems.push(problem(at('peft_type'), `${JSON.stringify(config.peft_type)} is not LORA`));
  if (!Number.isInteger(config.r) || (config.r as number) < 1) problems.push(problem(at('r'), 'the rank must be a positive integer'));
  if (config.lora_alpha !== undefined && typeof config.lora_alpha !== 'number') problems.push(problem(at('lora_alpha'), 'must be a number'));
  const targets = config.target_modules;
  if (!Array.isArray(targets) || targets.length === 0) problems.push(problem(at('target_modules'), 'must be a non-empty list of module names'));
  else for (const name of targets) if (!SUPPORTED_TARGETS.includes(name)) problems.push(problem(at('target_modules'), `${JSON.stringify(name)} is not supported; supported: ${SUPPORTED_TARGETS.join(', ')}`));
  for (const key of ['use_dora', 'rank_pattern', 'alpha_pattern', 'modules_to_save', 'layers_to_transform']) {
    const value = config[key];
    if (value && !(typeof value === 'object' && Object.keys(value).length === 0)) problems.push(problem(at(key), 'is not supported by this engine'));
  }
  return problems;
}

/** The tensors of a safetensors header against the base's shapes and the config's rank and targets. */
export function checkLoraTensors(header: Record<string, unknown>, rank: number, targets: string[], dims: BaseDims, dataBytes: number): FieldProblem[] {
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
    else if (fanIn === undefined || !targets.includes(module)) problems.push(problem(at, `module ${module} is not among target_modules`));
    else {
      const expected = ab === 'A' ? [rank, fanIn] : [fanOut, rank];
      if (JSON.stringify(tensor.shape) !== JSON.stringify(expected)) problems.push(problem(at, `shape ${JSON.stringify(tensor.shape)}; the base model and rank ${rank} need ${JSON.stringify(expected)}`));
    }
    if (!DTYPES.has(tensor.dtype ?? '')) problems.push(problem(at, `dtype ${tensor.dtype} (expected F32, F16 or BF16)`));
    const [start, end] = tensor.data_offsets ?? [];
    if (!(Number.isInteger(start) && Number.isInteger(end) && start <= end && end <= dataBytes)) problems.push(problem(at, 'data offsets outside the file'));
    seen.add(`${layer}.${module}.${ab}`);
  }
  for (const key of seen) {
    const twin = key.endsWith('A') ? `${key.slice(0, -1)}B` : `${key.slice(0, -1)}A`;
    if (!seen.has(twin)) problems.push(problem(['adapter_model.safetensors'], `layer ${key.split('.')[0]} ${key.split('.')[1]} has lora_${key.at(-1)} without its lora_${twin.at(-1)}`));
  }
  if (seen.size === 0) problems.push(problem(['adapter_model.safetensors'], 'holds no LoRA tensors'));
  return problems;
}
