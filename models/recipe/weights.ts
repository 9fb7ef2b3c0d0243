/**
 * Seeded random-init weights under HF Llama tensor names, written as safetensors by hand:
 * 8-byte little-endian header length, JSON header, raw little-endian fp32 buffers.
 */
import { Prng } from './prng.ts';

export interface LlamaShape {
  vocab_size: number;
  hidden_size: number;
  intermediate_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  num_key_value_heads: number;
  head_dim: number;
  initializer_range: number;
}

interface TensorSpec {
  name: string;
  shape: number[];
  init: 'normal' | 'ones';
}

/** Tied embeddings: no `lm_head.weight`. */
function llamaTensors(shape: LlamaShape): TensorSpec[] {
  const { hidden_size: h, intermediate_size: ffn, head_dim: d } = shape;
  const tensors: TensorSpec[] = [{ name: 'model.embed_tokens.weight', shape: [shape.vocab_size, h], init: 'normal' }];
  for (let layer = 0; layer < shape.num_hidden_layers; layer++) {
    const prefix = `model.layers.${layer}`;
    tensors.push(
      { name: `${prefix}.input_layernorm.weight`, shape: [h], init: 'ones' },
      { name: `${prefix}.self_attn.q_proj.weight`, shape: [shape.num_attention_heads * d, h], init: 'normal' },
      { name: `${prefix}.self_attn.k_proj.weight`, shape: [shape.num_key_value_heads * d, h], init: 'normal' },
      { name: `${prefix}.self_attn.v_proj.weight`, shape: [shape.num_key_value_heads * d, h], init: 'normal' },
      { name: `${prefix}.self_attn.o_proj.weight`, shape: [h, shape.num_attention_heads * d], init: 'normal' },
      { name: `${prefix}.post_attention_layernorm.weight`, shape: [h], init: 'ones' },
      { name: `${prefix}.mlp.gate_proj.weight`, shape: [ffn, h], init: 'normal' },
      { name: `${prefix}.mlp.up_proj.weight`, shape: [ffn, h], init: 'normal' },
      { name: `${prefix}.mlp.down_proj.weight`, shape: [h, ffn], init: 'normal' },
    );
  }
  tensors.push({ name: 'model.norm.weight', shape: [h], init: 'ones' });
  return tensors;
}

export function parameterCount(shape: LlamaShape): number {
  return llamaTensors(shape).reduce((sum, t) => sum + t.shape.reduce((a, b) => a * b, 1), 0);
}

/** Draws every tensor in declaration order from one stream, so the bytes depend only on the seed. */
export function llamaSafetensors(shape: LlamaShape, seed: number): Buffer {
  const rng = new Prng(seed);
  const specs = llamaTensors(shape);
  const header: Record<string, unknown> = { __metadata__: { format: 'pt' } };
  let offset = 0;
  for (const spec of specs) {
    const bytes = 4 * spec.shape.reduce((a, b) => a * b, 1);
    header[spec.name] = { dtype: 'F32', shape: spec.shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  // Pad with spaces so the data starts 8-byte aligned, as the reference writer does.
  let headerText = JSON.stringify(header);
  headerText += ' '.repeat((8 - ((8 + Buffer.byteLength(headerText)) % 8)) % 8);
  const headerBytes = Buffer.from(headerText, 'utf8');

  const file = Buffer.alloc(8 + headerBytes.length + offset);
  file.writeBigUInt64LE(BigInt(headerBytes.length), 0);
  headerBytes.copy(file, 8);
  let position = 8 + headerBytes.length;
  for (const spec of specs) {
    const count = spec.shape.reduce((a, b) => a * b, 1);
    for (let i = 0; i < count; i++, position += 4) {
      file.writeFloatLE(spec.init === 'ones' ? 1 : rng.normal(shape.initializer_range), position);
    }
  }
  return file;
}
